package batch

import (
	"errors"
	"io"
	"io/fs"

	"github.com/coupond/coupond/api"
)

// ResultDamage is a completed job whose result file cannot be read whole.
type ResultDamage struct {
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Reason string `json:"reason"` // "missing", or why it does not decompress
}

// CheckResults reads the result file of every completed job of tenant
// (every tenant's when ""), decompressing it whole as a download does, and
// returns those that cannot be read: missing, or damaged (their downloads
// would answer 200 and stop mid-stream). A file removed by retention, or a
// job that changed, while the check ran is not reported.
func (r *Runner) CheckResults(tenant string) ([]ResultDamage, error) {
	var out []ResultDamage
	for _, t := range r.db.Tenants() {
		if tenant != "" && t.ID != tenant {
			continue
		}
		jobs, err := r.list(t.ID)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			path, ok := r.ResultFile(j)
			if !ok {
				continue
			}
			if reason := readWhole(path); reason != "" && r.stillHolds(j) {
				out = append(out, ResultDamage{Tenant: j.Tenant, JobID: j.ID, Reason: reason})
			}
		}
	}
	return out, nil
}

// readWhole decompresses the result file at path to its end and says what
// failed ("" when nothing did).
func readWhole(path string) string {
	res, err := OpenResult(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return "cannot be read: " + err.Error()
	}
	defer res.Close()
	dec, err := res.Decompressed()
	if err == nil {
		_, err = io.Copy(io.Discard, dec)
	}
	if err != nil {
		return "does not decompress: " + err.Error()
	}
	return ""
}

// stillHolds reports whether job j is still completed with the same result
// file, read again: retention or a deletion may have changed it meanwhile.
func (r *Runner) stillHolds(j *Job) bool {
	now, err := r.Job(j.Tenant, j.ID)
	return err == nil && now != nil && now.Estado == api.EstadoCompletado && now.Result == j.Result
}
