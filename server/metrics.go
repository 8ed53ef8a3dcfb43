package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coupond/coupond/store"
)

// metrics are the Prometheus series served at /metrics. They live in their
// own registry (no package-level state).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	// series caches the resolved children per (route, status): resolving
	// label values allocates, a map lookup does not.
	mu     sync.RWMutex
	series map[seriesKey]seriesPair

	*business // what the service does for the retailer (business.go)
}

type seriesKey struct {
	route  string
	status int
}

type seriesPair struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

func newMetrics(db *store.DB, tenantLabel bool) *metrics {
	m := &metrics{
		series: map[seriesKey]seriesPair{},
		reg:    prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coupond_http_requests_total",
			Help: "HTTP requests by route and status.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coupond_http_request_duration_seconds",
			Help:    "HTTP request latency by route and status.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "status"}),
	}
	m.reg.MustRegister(m.requests, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		storeCollector{db})
	m.business = newBusiness(m.reg, tenantLabel)
	return m
}

var statusText = func() map[int]string {
	m := map[int]string{}
	for s := 100; s < 600; s++ {
		m[s] = strconv.Itoa(s)
	}
	return m
}()

func (m *metrics) observe(route string, status int, d time.Duration) {
	k := seriesKey{route, status}
	m.mu.RLock()
	p, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		st := statusText[status]
		if st == "" {
			st = strconv.Itoa(status)
		}
		p = seriesPair{m.requests.WithLabelValues(route, st), m.latency.WithLabelValues(route, st)}
		m.mu.Lock()
		m.series[k] = p
		m.mu.Unlock()
	}
	p.count.Inc()
	p.latency.Observe(d.Seconds())
}

// addQuarantine registers coupond_quarantined_records and
// coupond_damaged_records_seen_total (damaged records readers met since
// start). The gauge counts what admin check reports as damaged and left
// for the operator: the records held in quarantine, all tenants (count
// scans the quarantine tables at scrape time), the tenant and credential
// records the store could not decode at open and its notes of damaged
// write-ahead logs (unreadable, unreadableAndLogs: never moved to a
// tenant's quarantine) and the damaged files setAside lists
// (backup registries, owed-deletion lines),
// when not nil.
func (m *metrics) addQuarantine(count func() (int, error), unreadable, setAside func() []string, seen func() int64) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coupond_quarantined_records",
			Help: "Damaged records held in quarantine, all tenants, tenant and credential records left unread at open, damaged store logs found at open, and damaged backup registries and owed-deletion lines set aside (coupond admin check lists them)."},
			func() float64 {
				n, _ := count()
				n += len(unreadable())
				if setAside != nil {
					n += len(setAside())
				}
				return float64(n)
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coupond_damaged_records_seen_total",
			Help: "Damaged records met by readers since start; each is moved to quarantine."},
			func() float64 { return float64(seen()) }))
}

// unreadableAndLogs lists what the store left for the operator at open:
// the tenant and credential records it could not decode and its notes of
// damaged write-ahead logs (store.LogDamage, until admin check --repair).
func unreadableAndLogs(db *store.DB) func() []string {
	return func() []string {
		out := append([]string{}, db.Unreadable()...)
		logs, _ := db.LogDamage()
		for _, l := range logs {
			out = append(out, l.File)
		}
		return out
	}
}

// addBackupRegistry registers coupond_backup_registry_unreadable: 1 while
// unusable (nil: never) says the backup registry could not be used at its
// last read, when deletions are owed to every backup and no backup can be
// taken or restored (admin check reports it and exits 1).
func (m *metrics) addBackupRegistry(unusable func() bool) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coupond_backup_registry_unreadable",
		Help: "1 while the backup registry (backups.json) cannot be read or, damaged, was not rebuilt: deletions are owed to every backup, no backup can be taken (coupond admin check reports it)."},
		func() float64 {
			if unusable != nil && unusable() {
				return 1
			}
			return 0
		}))
}

// addDiskSpace registers the free space of the store's file system, the
// reserve, and whether writes are refused (contract §8).
func (m *metrics) addDiskSpace(space func() store.SpaceStatus) {
	m.reg.MustRegister(diskSpaceGauges(space)...)
}

// DiskSpaceMetrics serves, in the Prometheus text format, the disk series
// of /metrics alone: what serve answers at /metrics while it waits at
// start for space above the reserve, with the store still closed.
func DiskSpaceMetrics(space func() store.SpaceStatus) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(diskSpaceGauges(space)...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// diskSpaceGauges are coupond_disk_available_bytes,
// coupond_disk_reserve_bytes and coupond_writes_refused, read from space
// at scrape time.
func diskSpaceGauges(space func() store.SpaceStatus) []prometheus.Collector {
	gauge := func(name, help string, v func(s store.SpaceStatus) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(space()) })
	}
	return []prometheus.Collector{
		gauge("coupond_disk_available_bytes", "Free space on the data dir's file system.", func(s store.SpaceStatus) float64 { return float64(s.Avail) }),
		gauge("coupond_disk_reserve_bytes", "Reserve of free space (serve --disk-reserve).", func(s store.SpaceStatus) float64 { return float64(s.Reserve) }),
		gauge("coupond_writes_refused", "1 while writes answer 503 almacenamiento_lleno.", func(s store.SpaceStatus) float64 {
			if s.Low || s.Failed {
				return 1
			}
			return 0
		}),
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// storeCollector exports the store's health: disk use, read amplification,
// compaction debt and activity, memtable and WAL sizes, write stalls.
type storeCollector struct{ db *store.DB }

var (
	descDisk       = prometheus.NewDesc("coupond_store_disk_bytes", "Disk space used by the store.", nil, nil)
	descReadAmp    = prometheus.NewDesc("coupond_store_read_amplification", "Read amplification of the LSM.", nil, nil)
	descDebt       = prometheus.NewDesc("coupond_store_compaction_debt_bytes", "Estimated compaction debt.", nil, nil)
	descCompacts   = prometheus.NewDesc("coupond_store_compactions_total", "Compactions run.", nil, nil)
	descCompacting = prometheus.NewDesc("coupond_store_compactions_in_progress", "Compactions in progress.", nil, nil)
	descMemtable   = prometheus.NewDesc("coupond_store_memtable_bytes", "Memtable size.", nil, nil)
	descWAL        = prometheus.NewDesc("coupond_store_wal_bytes", "Live WAL size.", nil, nil)
	// Every acknowledged write is committed with Sync; concurrent commits
	// share one WAL fsync (group commit). Fsyncs against requests answered
	// shows how much they share.
	descFsyncs = prometheus.NewDesc("coupond_store_wal_fsyncs_total", "WAL fsyncs since the store opened.", nil, nil)
	// A write stall stops every commit, so every write route, until a
	// flush or an L0 compaction catches up.
	descStalls    = prometheus.NewDesc("coupond_store_write_stalls_total", "Write stalls (every commit stopped) since the store opened.", nil, nil)
	descStallTime = prometheus.NewDesc("coupond_store_write_stall_seconds_total", "Time commits were stopped by write stalls since the store opened.", nil, nil)
)

func (storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDisk, descReadAmp, descDebt, descCompacts, descCompacting, descMemtable, descWAL, descFsyncs, descStalls, descStallTime} {
		ch <- d
	}
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.db == nil {
		return
	}
	m := c.db.Metrics()
	g := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(d, t, v)
	}
	g(descDisk, prometheus.GaugeValue, float64(m.DiskBytes))
	g(descReadAmp, prometheus.GaugeValue, float64(m.ReadAmp))
	g(descDebt, prometheus.GaugeValue, float64(m.CompactionDebt))
	g(descCompacts, prometheus.CounterValue, float64(m.Compactions))
	g(descCompacting, prometheus.GaugeValue, float64(m.CompactionsInProgress))
	g(descMemtable, prometheus.GaugeValue, float64(m.MemtableBytes))
	g(descWAL, prometheus.GaugeValue, float64(m.WALBytes))
	if m.WALFsyncs >= 0 {
		g(descFsyncs, prometheus.CounterValue, float64(m.WALFsyncs))
	}
	g(descStalls, prometheus.CounterValue, float64(m.WriteStalls))
	g(descStallTime, prometheus.CounterValue, m.WriteStallTime.Seconds())
}
