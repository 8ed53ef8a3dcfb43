package privacy

import (
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
)

// BenchmarkExportStreamDecisions exports through ExportStream, written
// nowhere, a customer with 200,000 decisions (a third of them executed, a
// fifth refused) and reports the export's heap peak above the heap in use
// before it (heap-peak-MB: HeapAlloc sampled every 20 ms and at the end)
// and what it allocated (alloc-MB): with collections left to the runtime
// (gc=runtime), and with one forced before each sample (gc=forced: the
// peak of what the export keeps, the sampling's pauses in its time). Its
// setup makes the decisions: about ten seconds.
func BenchmarkExportStreamDecisions(b *testing.B) {
	e, p, db, _ := newTest(b, 2)
	decideMany(b, e, db, "MOSTRADOR0001", 200000)
	for _, forced := range []bool{false, true} {
		name := map[bool]string{false: "gc=runtime", true: "gc=forced"}[forced]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				peak, alloc := heapPeakDuring(forced, func() {
					write, err := p.ExportStream("acme", "MOSTRADOR0001", "ci", "trace")
					if err == nil {
						err = write(io.Discard)
					}
					if err != nil {
						b.Fatal(err)
					}
				})
				b.ReportMetric(float64(peak)/(1<<20), "heap-peak-MB")
				b.ReportMetric(float64(alloc)/(1<<20), "alloc-MB")
			}
		})
	}
}

// heapPeakDuring runs f and returns the most heap in use (HeapAlloc,
// sampled every 20 ms and after f, each sample after a collection when
// collect is set) above what was in use before it, and the bytes it
// allocated.
func heapPeakDuring(collect bool, f func()) (peak, alloc uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, total := ms.HeapAlloc, ms.TotalAlloc
	sample := func(ms *runtime.MemStats) {
		if collect {
			runtime.GC()
		}
		runtime.ReadMemStats(ms)
		if ms.HeapAlloc > base {
			peak = max(peak, ms.HeapAlloc-base)
		}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		var ms runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample(&ms)
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	sample(&ms)
	return peak, ms.TotalAlloc - total
}
