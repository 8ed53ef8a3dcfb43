package cli

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/internal/syncbuf"
)

func TestLogBuffer(t *testing.T) {
	var out syncbuf.Buffer
	lb := newLogBuffer(&out, time.Hour) // no timed flush in this test
	log := zerolog.New(lb)
	log.Info().Msg("one")
	log.Info().Msg("two")
	if got := out.String(); got != "" {
		t.Fatalf("info lines written before a flush: %q", got)
	}
	log.Warn().Msg("three")
	want := `{"level":"info","message":"one"}` + "\n" + `{"level":"info","message":"two"}` + "\n" + `{"level":"warn","message":"three"}` + "\n"
	if got := out.String(); got != want {
		t.Fatalf("after a warning:\n got %q\nwant %q", got, want)
	}
	log.Info().Msg("four")
	lb.Close()
	if got := out.String(); got != want+`{"level":"info","message":"four"}`+"\n" {
		t.Fatalf("after Close: %q", got)
	}
}

func TestLogBufferFlushesOnTime(t *testing.T) {
	var out syncbuf.Buffer // safe for the flusher goroutine
	lb := newLogBuffer(&out, 10*time.Millisecond)
	defer lb.Close()
	l := zerolog.New(lb)
	l.Info().Msg("x")
	deadline := time.Now().Add(5 * time.Second)
	for out.String() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if out.String() == "" {
		t.Fatal("line not written by the timer")
	}
}
