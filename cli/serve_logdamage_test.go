package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestServeLogsUnacknowledgedLogDamage: serve's log says a damaged store
// log whoever opened the store first: an admin command run with the server
// stopped keeps the note and says nothing, and serve said only what its own
// open found, so that damage never reached the log. Each note is logged
// once a start until admin check --repair acknowledges it.
func TestServeLogsUnacknowledgedLogDamage(t *testing.T) {
	type line struct {
		Level, File string
		Lost        int
		Earlier     bool
	}
	tests := []struct {
		name   string
		damage bool
		before func(t *testing.T, fs storefs.FS) // opens before serve's, if any
		want   []line
	}{
		{"whole log", false, nil, nil},
		// The log holds the format mark's write (store.Open) and fillLog's
		// 600: the bytes flipped in its middle lose 301 of them.
		{"found by serve's open", true, nil, []line{{Level: "error", Lost: 301}}},
		{"found by an admin command's open", true, openLogDamageStoreAndClose, []line{{Level: "error", Lost: 301, Earlier: true}}},
		{"acknowledged", true, func(t *testing.T, fs storefs.FS) {
			db := openLogDamageStore(t, fs)
			if err := db.ClearLogDamage(); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs storefs.FS = storefs.Mem()
			db := openLogDamageStore(t, fs)
			fillLog(t, db)
			db.Close()
			if tt.damage {
				flipMiddleOfNewestMemLog(t, fs)
			}
			if tt.before != nil {
				tt.before(t, fs)
			}
			db = openLogDamageStore(t, fs)
			defer db.Close()
			var buf bytes.Buffer
			logStoreLogDamage(zerolog.New(&buf), db)
			var got []line
			for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				var v struct {
					Level, File, Message string
					Lost                 int
					FoundAt              string `json:"found_at"`
				}
				if len(l) == 0 {
					continue
				}
				if err := json.Unmarshal(l, &v); err != nil {
					t.Fatalf("log line %q: %v", l, err)
				}
				got = append(got, line{Level: v.Level, File: v.File, Lost: v.Lost, Earlier: v.FoundAt != ""})
			}
			for i := range got {
				if got[i].File == "" {
					t.Errorf("line %d names no log: %s", i, buf.String())
				}
				got[i].File = ""
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("serve's log (-want +got):\n%s\n%s", diff, buf.String())
			}
		})
	}
}

// openLogDamageStore opens the store "db" on fs.
func openLogDamageStore(t *testing.T, fs storefs.FS) *store.DB {
	t.Helper()
	db, err := store.Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func openLogDamageStoreAndClose(t *testing.T, fs storefs.FS) { openLogDamageStore(t, fs).Close() }

// flipMiddleOfNewestMemLog inverts three bytes in the middle of the newest
// write-ahead log of the store "db" on fs.
func flipMiddleOfNewestMemLog(t *testing.T, fs storefs.FS) {
	t.Helper()
	names, err := fs.List("db")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names) // zero-padded numbers sort
	var newest string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			newest = n
		}
	}
	f, err := fs.OpenReadWrite(fs.PathJoin("db", newest), "unspecified")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	if _, err := f.ReadAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
}
