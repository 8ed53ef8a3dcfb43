package policy

import "math"

// Small dense linear algebra on row-major []float64 matrices. Sizes are a
// few dozen, so plain loops are fast enough and keep the package free of
// dependencies.

// invSPD returns the inverse of the n×n symmetric positive definite a
// (left untouched) by Cholesky factorisation. A matrix that is not
// numerically positive definite gets a small ridge added until it is.
func invSPD(a []float64, n int) []float64 {
	l := make([]float64, n*n)
	jitter := 0.0
	for attempt := 0; attempt < 8; attempt++ {
		if cholesky(a, n, jitter, l) {
			return cholInverse(l, n)
		}
		jitter = math.Max(jitter*100, 1e-9*maxDiag(a, n)+1e-12)
	}
	// Give up on the off-diagonal: the inverse of the diagonal.
	inv := make([]float64, n*n)
	for i := 0; i < n; i++ {
		inv[i*n+i] = 1 / math.Max(a[i*n+i], 1e-12)
	}
	return inv
}

func maxDiag(a []float64, n int) float64 {
	m := 0.0
	for i := 0; i < n; i++ {
		m = math.Max(m, math.Abs(a[i*n+i]))
	}
	return m
}

// cholesky writes the lower factor L of a + jitter·I = LLᵀ into l and
// reports whether a is positive definite.
func cholesky(a []float64, n int, jitter float64, l []float64) bool {
	for i := range l {
		l[i] = 0
	}
	for j := 0; j < n; j++ {
		s := a[j*n+j] + jitter
		for k := 0; k < j; k++ {
			s -= l[j*n+k] * l[j*n+k]
		}
		if !(s > 0) {
			return false
		}
		d := math.Sqrt(s)
		l[j*n+j] = d
		for i := j + 1; i < n; i++ {
			s := a[i*n+j]
			for k := 0; k < j; k++ {
				s -= l[i*n+k] * l[j*n+k]
			}
			l[i*n+j] = s / d
		}
	}
	return true
}

// cholInverse returns (LLᵀ)⁻¹ from the lower factor L.
func cholInverse(l []float64, n int) []float64 {
	// Linv, lower triangular.
	li := make([]float64, n*n)
	for i := 0; i < n; i++ {
		li[i*n+i] = 1 / l[i*n+i]
		for j := 0; j < i; j++ {
			var s float64
			for k := j; k < i; k++ {
				s += l[i*n+k] * li[k*n+j]
			}
			li[i*n+j] = -s / l[i*n+i]
		}
	}
	inv := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			var s float64
			for k := i; k < n; k++ {
				s += li[k*n+i] * li[k*n+j]
			}
			inv[i*n+j], inv[j*n+i] = s, s
		}
	}
	return inv
}

// mul returns a·b for a r×k and b k×c.
func mul(a, b []float64, r, k, c int) []float64 {
	out := make([]float64, r*c)
	for i := 0; i < r; i++ {
		row := out[i*c : (i+1)*c]
		for t := 0; t < k; t++ {
			v := a[i*k+t]
			if v == 0 {
				continue
			}
			br := b[t*c : (t+1)*c]
			for j := range row {
				row[j] += v * br[j]
			}
		}
	}
	return out
}

// transpose returns aᵀ for a r×c.
func transpose(a []float64, r, c int) []float64 {
	out := make([]float64, r*c)
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			out[j*r+i] = a[i*c+j]
		}
	}
	return out
}

// addTo adds b to a, element by element (same length), scaled by s.
func addTo(a, b []float64, s float64) {
	for i := range a {
		a[i] += s * b[i]
	}
}

// mulVec returns a·x for a r×c.
func mulVec(a, x []float64, r, c int) []float64 {
	out := make([]float64, r)
	for i := 0; i < r; i++ {
		var s float64
		for j, v := range a[i*c : (i+1)*c] {
			s += v * x[j]
		}
		out[i] = s
	}
	return out
}

// quad returns xᵀax for a n×n.
func quad(a, x []float64, n int) float64 {
	var q float64
	for i := 0; i < n; i++ {
		xi := x[i]
		if xi == 0 {
			continue
		}
		var s float64
		row := a[i*n : (i+1)*n]
		for j, v := range row {
			s += v * x[j]
		}
		q += xi * s
	}
	return q
}

// bilinear is xᵀ·M·y for M of len(x)×len(y), row-major.
func bilinear(m, x, y []float64) float64 {
	var s float64
	for i, u := range x {
		if u != 0 {
			s += u * dot(m[i*len(y):(i+1)*len(y)], y)
		}
	}
	return s
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// rankOne adds s·u·vᵀ to a (len(u)×len(v)).
func rankOne(a, u, v []float64, s float64) {
	c := len(v)
	for i, ui := range u {
		if ui == 0 {
			continue
		}
		f := s * ui
		row := a[i*c : (i+1)*c]
		for j, vj := range v {
			row[j] += f * vj
		}
	}
}
