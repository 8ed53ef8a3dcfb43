package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestDiskReserve: below the reserve, writes answer 503
// almacenamiento_lleno with Retry-After while reads, exports, deletions and
// /healthz go on and /readyz says why; when space comes back writes resume
// with no restart.
func TestDiskReserve(t *testing.T) {
	mem := storefs.Mem()
	const gib = 1 << 30
	mem.TestingSetDiskUsage(storefs.DiskUsage{AvailBytes: 10 * gib, TotalBytes: 20 * gib})
	h := newHarnessOn(t, mem)
	h.db.SetReserve(gib)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
	tok := h.token("acme", allScopes...)
	h.catalog(tok, 2)
	const ana = "ana-00000001"
	h.acceptEvents(tok, purchaseAt("e1", ana, testStart.Add(-time.Hour)))

	mem.TestingSetDiskUsage(storefs.DiskUsage{AvailBytes: gib - 1, TotalBytes: 20 * gib})
	time.Sleep(300 * time.Millisecond) // past the cached reading
	for _, w := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/eventos", map[string]any{"eventos": []any{purchaseAt("e2", ana, testStart)}}},
		{"POST", "/v1/decisiones", decideBody(ana, nil)},
		{"PUT", "/v1/campanas/c1", map[string]any{"canal": "push", "descripcion": "x"}},
	} {
		resp := h.raw(w.method, w.path, tok, w.body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s below the reserve: %d (Retry-After %q), want 503 with Retry-After", w.method, w.path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if _, body := h.do(w.method, w.path, tok, w.body); body["codigo"] != "almacenamiento_lleno" {
			t.Errorf("%s %s: %v", w.method, w.path, body)
		}
	}
	if st, _ := h.do("GET", "/healthz", "", nil); st != 200 {
		t.Errorf("/healthz: %d", st)
	}
	if st, body := h.do("GET", "/readyz", "", nil); st != 503 || body["estado"] != "almacenamiento_lleno" || body["motivo"] == nil {
		t.Errorf("/readyz below the reserve: %d %v", st, body)
	}
	if st, x := h.do("GET", "/v1/clientes/"+ana+"/exportacion", tok, nil); st != 200 || len(x["eventos"].([]any)) != 1 {
		t.Errorf("export below the reserve: %d %v", st, x)
	}
	if st, _ := h.do("DELETE", "/v1/clientes/"+ana, tok, nil); st != 202 {
		t.Errorf("deletion below the reserve: %d", st)
	}
	if ds, err := h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{}); err != nil || ds.Completed != 1 {
		t.Errorf("deletion pass below the reserve: %+v %v", ds, err)
	}

	mem.TestingSetDiskUsage(storefs.DiskUsage{AvailBytes: 2 * gib, TotalBytes: 20 * gib})
	time.Sleep(300 * time.Millisecond)
	h.acceptEvents(tok, purchaseAt("e3", "beto-0000002", testStart))
	if st, body := h.do("GET", "/readyz", "", nil); st != 200 {
		t.Errorf("/readyz after space came back: %d %v", st, body)
	}
}

// TestENOSPCInjected: the file system fails every write with ENOSPC while
// clients post events (the reserve is off, so Pebble meets it). No answer
// is a 500, nothing panics or hangs, and after a crash and a restart on
// the synced data every acknowledged event is there.
func TestENOSPCInjected(t *testing.T) {
	mem := storefs.CrashableMem()
	fs, full := storefs.WithWriteFaults(mem, func(path string) error { return fmt.Errorf("%s: %w", path, syscall.ENOSPC) })
	h := newHarnessOn(t, fs)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
	tok := h.token("acme", allScopes...)

	var mu sync.Mutex
	var acked []string
	statuses := map[int]int{}
	post := func(w, i int) {
		id := fmt.Sprintf("w%d-%03d", w, i)
		st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchaseAt(id, fmt.Sprintf("cliente-%04d", i%7), testStart.Add(-time.Hour))}})
		mu.Lock()
		defer mu.Unlock()
		statuses[st]++
		switch {
		case st == 200 && body["aceptados"] == 1.0:
			acked = append(acked, id)
		case st == 503 && body["codigo"] == "almacenamiento_lleno":
			// The store's error names its directory and the disk's
			// cause: for the operator's log, never an API client's.
			if text := fmt.Sprint(body); strings.Contains(text, "disk full at") || strings.Contains(text, "no space left") {
				t.Errorf("event %s: the 503's body holds the store's error: %v", id, body)
			}
		default:
			t.Errorf("event %s: %d %v", id, st, body)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					if w == 0 && i == 20 {
						full.On()
					}
					post(w, i)
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("requests hang on a full disk")
	}
	if statuses[503] == 0 || len(acked) == 0 {
		t.Fatalf("statuses %v: want both acknowledged writes and 503s", statuses)
	}
	// Health and reads keep answering.
	if st, _ := h.do("GET", "/healthz", "", nil); st != 200 {
		t.Errorf("/healthz: %d", st)
	}
	if st, body := h.do("GET", "/readyz", "", nil); st != 503 || body["estado"] != "almacenamiento_lleno" {
		t.Errorf("/readyz: %d %v", st, body)
	}
	if err := h.srv.Flush(); !errors.Is(err, store.ErrFull) && err != nil {
		t.Errorf("flush of counters: %v", err)
	}

	// Crash: only synced data survives; restart without the fault.
	clone := mem.CrashClone(storefs.CrashCloneCfg{})
	db, err := store.Open("db", clone)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer db.Close()
	e := engine.New(engine.Config{DB: db, Secrets: h.secrets, Log: zerolog.Nop(), Now: h.clock.Now, Seed: 1})
	for _, id := range acked {
		if _, err := db.Get(store.EventKey("acme", id)); err != nil {
			t.Errorf("acknowledged event %s lost: %v", id, err)
		}
	}
	if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 0 {
		t.Errorf("check after restart: %+v %v", st, err)
	}
	t.Logf("statuses %v, %d acknowledged", statuses, len(acked))
}

// TestNoDescriptorsAnswers503: a write whose store read cannot open or
// read a table for want of file descriptors (EMFILE, ENFILE), the store not
// failed, answers 503 almacenamiento_lleno saying so, with Retry-After, not
// 500 error_interno: on the real binary under ulimit -n 200, events
// batches answered 500 while connections held the descriptors.
func TestNoDescriptorsAnswers503(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			fs, faults := storefs.WithReadFaults(storefs.Mem(), func(path string) error {
				if strings.HasSuffix(path, ".sst") {
					return fmt.Errorf("open %s: %w", path, errno)
				}
				return nil
			})
			h := newHarnessOn(t, fs)
			h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
			tok := h.token("acme", allScopes...)
			h.catalog(tok, 2)
			const ana = "ana-00000001"
			h.acceptEvents(tok, purchaseAt("e1", ana, testStart.Add(-time.Hour)))
			if err := h.db.Flush(); err != nil {
				t.Fatal(err)
			}
			faults.On()
			var got []string
			for _, w := range []struct {
				path string
				body any
			}{
				{"/v1/eventos", map[string]any{"eventos": []any{purchaseAt("e2", ana, testStart)}}},
				{"/v1/decisiones", decideBody(ana, nil)},
			} {
				resp := h.raw("POST", w.path, tok, w.body)
				body := apitest.Object(t, resp)
				got = append(got, fmt.Sprint(w.path, " ", resp.StatusCode, " ", body["codigo"], " ", body["mensaje"], " ", resp.Header.Get("Retry-After")))
			}
			faults.Off()
			want := []string{
				"/v1/eventos 503 almacenamiento_lleno " + storageNoDescriptors + " 5",
				"/v1/decisiones 503 almacenamiento_lleno " + storageNoDescriptors + " 5",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("writes whose reads found no descriptor (-want +got):\n%s", diff)
			}
			if sp := h.db.Space(); sp.Failed {
				t.Errorf("store after reads without descriptors: %+v, want not failed", sp)
			}
		})
	}
}

// TestStoreStoppedSaysWhy: once a write failed inside the store, a write
// answers 503 almacenamiento_lleno whose mensaje says a restart is needed
// (it promised writes would resume by themselves), unless the store
// failed for want of space, or of file descriptors, and serve restarts
// itself once space is back, or files can be opened again
// (store.DB.SetResumes), and /readyz names the cause: the lack of space or
// of descriptors, or another I/O error (EIO was reported as a full disk),
// and whether coupond restarts by itself.
func TestStoreStoppedSaysWhy(t *testing.T) {
	resumesMotivo := "una escritura falló dentro del almacén por falta de espacio: coupond se reinicia solo, en el mismo proceso y sin cerrar el puerto, en cuanto el disco tenga espacio libre; libere espacio"
	for _, tt := range []struct {
		errno   syscall.Errno
		resumes bool
		mensaje string
		motivo  string
	}{
		{syscall.ENOSPC, false, storageStopped, "una escritura falló dentro del almacén por falta de espacio: libere espacio y reinicie coupond"},
		{syscall.ENOSPC, true, errorTable[kindStorageFull].msg, resumesMotivo},
		{syscall.EIO, false, storageStopped, "una escritura falló dentro del almacén por un error de entrada/salida del disco: revise el disco y reinicie coupond"},
		{syscall.EIO, true, storageStopped, "una escritura falló dentro del almacén por un error de entrada/salida del disco: revise el disco y reinicie coupond"},
		{syscall.EMFILE, false, storageStopped, "una escritura falló dentro del almacén por falta de descriptores de archivo: eleve el límite de archivos abiertos (LimitNOFILE) y reinicie coupond"},
		{syscall.EMFILE, true, storageNoFiles, "una escritura falló dentro del almacén por falta de descriptores de archivo: coupond se reinicia solo, en el mismo proceso y sin cerrar el puerto, en cuanto pueda abrir archivos de nuevo; revise su límite de archivos abiertos (LimitNOFILE)"},
		{syscall.ENFILE, true, storageNoFiles, "una escritura falló dentro del almacén por falta de descriptores de archivo: coupond se reinicia solo, en el mismo proceso y sin cerrar el puerto, en cuanto pueda abrir archivos de nuevo; revise su límite de archivos abiertos (LimitNOFILE)"},
	} {
		t.Run(fmt.Sprintf("%s resumes=%v", tt.errno, tt.resumes), func(t *testing.T) {
			fs, faults := storefs.WithWriteFaults(storefs.Mem(), func(path string) error { return fmt.Errorf("%s: %w", path, tt.errno) })
			h := newHarnessOn(t, fs)
			h.db.SetResumes(tt.resumes)
			h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false })
			tok := h.token("acme", allScopes...)
			faults.On()
			var got []string
			for _, id := range []string{"e1", "e2"} { // the failing write, then one the store refuses at once
				resp := h.raw("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchaseAt(id, "ana-00000001", testStart)}})
				body := apitest.Object(t, resp)
				got = append(got, fmt.Sprint(resp.StatusCode, " ", body["codigo"], " ", body["mensaje"], " ", resp.Header.Get("Retry-After") != ""))
			}
			_, ready := h.do("GET", "/readyz", "", nil)
			got = append(got, fmt.Sprint(ready["motivo"]))
			stopped := "503 almacenamiento_lleno " + tt.mensaje + " true"
			if diff := cmp.Diff([]string{stopped, stopped, tt.motivo}, got); diff != "" {
				t.Errorf("answers after a failed write (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParkedFlushAnswersDecisions: a flush (a deletion pass's, say) whose
// new write-ahead log cannot be made parks inside the store holding its
// commit pipeline, with decisions of one campaign already committing
// behind it: the first holding the campaign's budget lock, the others
// waiting for that lock. Each answers 503 almacenamiento_lleno within
// seconds (they waited until a restart, their lock held), and the flush
// ErrFull.
func TestParkedFlushAnswersDecisions(t *testing.T) {
	rotating := make(chan struct{})
	var once sync.Once
	fs, faults := storefs.WithCreateFaults(storefs.Mem(), func(path string) error {
		if !strings.HasSuffix(path, ".log") {
			return nil
		}
		once.Do(func() { close(rotating) })
		time.Sleep(300 * time.Millisecond) // the decisions reach the store meanwhile
		return fmt.Errorf("%s: %w", path, syscall.ENOSPC)
	})
	h := newHarnessOn(t, fs)
	h.tenant("acme", true, func(s *store.Settings) { s.RateLimits = false; s.ControlShare = 0 })
	tok := h.token("acme", allScopes...)
	h.catalog(tok, 2)
	if st, b := h.do("PUT", "/v1/campanas/navidad", tok, map[string]any{"canal": "push", "descripcion": "Navidad", "max_envios": 1000}); st != 200 {
		t.Fatalf("campaign: %d %v", st, b)
	}
	faults.On()
	flushed := make(chan error, 1)
	go func() { flushed <- h.db.Flush() }()
	<-rotating
	const decisions = 4
	answers := make(chan string, decisions)
	for i := range decisions {
		// Served in process, so that handlers left waiting (without the
		// fix) do not hold up the harness's HTTP server at its Close.
		body, _ := json.Marshal(decideBody(fmt.Sprintf("parked-%04d", i), map[string]any{"canal": "push", "campana_id": "navidad"}))
		req := httptest.NewRequest("POST", "/v1/decisiones", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			w := httptest.NewRecorder()
			h.srv.ServeHTTP(w, req)
			var answer struct{ Codigo string }
			_ = json.Unmarshal(w.Body.Bytes(), &answer)
			answers <- fmt.Sprint(w.Code, " ", answer.Codigo)
		}()
	}
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < decisions+1 {
		select {
		case a := <-answers:
			got = append(got, a)
		case err := <-flushed:
			got = append(got, fmt.Sprint("flush ErrFull ", errors.Is(err, store.ErrFull)))
		case <-deadline:
			t.Fatalf("after 10 s, of %d decisions and a flush behind a parked flush, answered: %q", decisions, got)
		}
	}
	slices.Sort(got)
	want := []string{"503 almacenamiento_lleno", "503 almacenamiento_lleno", "503 almacenamiento_lleno", "503 almacenamiento_lleno", "flush ErrFull true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers behind a parked flush (-want +got):\n%s", diff)
	}
}
