package batch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/coupond/coupond/api"
)

// ResultDamage is a completed job whose result file cannot be read whole.
type ResultDamage struct {
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	Reason string `json:"reason"` // ResultMissing, or why it does not decompress
}

// ResultMissing is the Reason of a ResultDamage whose file is not there.
const ResultMissing = "missing"

// CheckResults reads the result file of every completed job of tenant
// (every tenant's when ""), decompressing it whole as a download does, and
// returns those that cannot be read: missing (their downloads answer 404),
// or damaged (500: a damaged file is forgotten as verified, ForgetVerified,
// so that its next download reads it again). A file removed by retention,
// or a job that changed, while the check ran is not reported.
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
			reason := readWhole(path)
			if reason != "" {
				r.forgetVerified(path)
			}
			if reason != "" && r.stillHolds(j) {
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
		return ResultMissing
	}
	if err != nil {
		return "cannot be read: " + err.Error()
	}
	defer res.Close()
	if err := res.decompressAll(); err != nil {
		return "does not decompress: " + err.Error()
	}
	return ""
}

// decompressAll decompresses res from its start to its end, checksum
// included, and frees its decoder.
func (res *Result) decompressAll() error {
	dec, err := resultDecoder(res.Compressed())
	if err != nil {
		return err
	}
	defer dec.Close()
	_, err = io.Copy(io.Discard, dec)
	return err
}

// stillHolds reports whether job j is still completed with the same result
// file, read again: retention or a deletion may have changed it meanwhile.
func (r *Runner) stillHolds(j *Job) bool {
	now, err := r.Job(j.Tenant, j.ID)
	return err == nil && now != nil && now.Estado == api.EstadoCompletado && now.Result == j.Result
}

// resultStamp is a result file as it is on disk: a rewrite (a customer's
// deletion) changes it.
type resultStamp struct {
	size, modNanos int64
}

// VerifyResult decompresses res, a result file OpenResult opened, to its
// end, checksum included, unless it did so already for that path with the
// file as res has it now (same size and modification time): a download
// that verifies the file it opened and then sends it answers an error for
// a damaged file rather than a 200 it would cut short, and a file removed
// meanwhile is not its concern (res keeps it readable). Safe for
// concurrent use; downloads of a file not yet verified each read it.
func (r *Runner) VerifyResult(res *Result) error {
	st, err := res.f.Stat()
	if err != nil {
		return fmt.Errorf("batch: verify result: %w", err)
	}
	path, stamp := res.f.Name(), resultStamp{st.Size(), st.ModTime().UnixNano()}
	if v, ok := r.verified.Load(path); ok && v.(resultStamp) == stamp {
		return nil
	}
	if err := res.decompressAll(); err != nil {
		return fmt.Errorf("result file %s: does not decompress: %w", filepath.Base(path), err)
	}
	r.verified.Store(path, stamp)
	return nil
}

// ForgetVerified drops what VerifyResult remembers of res's file: a
// download that found it damaged while sending it (damaged in place since
// it was verified: its size and time unchanged) calls it so that the next
// download reads the file whole again and answers 500, rather than a 200
// cut short again and again.
func (r *Runner) ForgetVerified(res *Result) { r.forgetVerified(res.f.Name()) }

// forgetVerified drops what VerifyResult remembers of the file at path
// (damaged, or removed: removeResult).
func (r *Runner) forgetVerified(path string) { r.verified.Delete(path) }
