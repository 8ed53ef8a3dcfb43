package engine

import (
	"slices"
	"sync"

	"github.com/coupond/coupond/policy"
)

// What the engine feeds the policy model (package policy): the customer
// vector, the customer's spend shares in the tenant's main categories, the
// economic prior, and per candidate action the prior and the customer's
// affinity to the action's categorias. Decision records keep all of it
// (X, Shares, Priors, Aff), so learning and evaluation rebuild exactly what
// the decision saw.

// affPerAction is the number of affinity values per candidate in
// DecisionRecord.Aff: share, frequency and recency.
const affPerAction = 3

// catShares writes the customer's spend share in each of names into dst.
func (s *featSummary) catShares(names []string, dst []float64) []float64 {
	for _, n := range names {
		dst = append(dst, s.categoryShare(n))
	}
	return dst
}

// catAffinity is the customer's affinity to a set of categories over the
// category window (this month and the 12 before): the share of their spend
// in them, the share of the 13 months with a purchase in them, and how
// recent the newest such month is (1 this month, falling by 1/13 a month,
// 0 if none). No names: all zero.
func (s *featSummary) catAffinity(names []string) (share, freq, rec float64) {
	if len(names) == 0 || s.catTotal <= 0 || s.f.set&featHasLast == 0 {
		return 0, 0, 0
	}
	const months = featCatWindow + 1
	off := int(featMonthOf(s.today) - featMonthOf(featDayOf(s.f.lastTS))) // months from lastTS's to today's
	var active [months]bool
	var spend int64
	for i := range s.f.cats {
		c := &s.f.cats[i]
		if i >= len(s.catSpend) || c.name == "" || !slices.Contains(names, c.name) {
			continue
		}
		spend += s.catSpend[i]
		for k, v := range c.spend {
			if age := k + off; v > 0 && age >= 0 && age < months {
				active[age] = true
			}
		}
	}
	share = float64(spend) / float64(s.catTotal)
	newest := -1
	for age := months - 1; age >= 0; age-- {
		if active[age] {
			freq++
			newest = age
		}
	}
	freq /= months
	if newest >= 0 {
		rec = 1 - float64(newest)/months
	}
	return share, freq, rec
}

// catNames appends the names of the customer's categories with spend in
// the window.
func (s *featSummary) catNames(dst []string) []string {
	for i := range s.f.cats {
		if i < len(s.catSpend) && s.catSpend[i] > 0 && s.f.cats[i].name != "" {
			dst = append(dst, s.f.cats[i].name)
		}
	}
	return dst
}

// policyCustomer is the customer as the model sees it.
func (c *customer) policyCustomer(cats []string) policy.Customer {
	return policy.Customer{X: c.x, Shares: c.sum.catShares(cats, make([]float64, 0, len(cats))), Base: c.baselineCents}
}

// arm is the (customer, action) pair as the model sees it; a nil action is
// never-send.
func (c *customer) arm(a *Action) policy.Arm {
	if a == nil {
		return policy.Arm{ID: 0, Prior: c.baselineCents}
	}
	arm := policy.Arm{ID: a.armKey(), Prior: c.prior(a), Downside: c.downside(a)}
	arm.AffShare, arm.AffFreq, arm.AffRec = c.sum.catAffinity(a.Categorias)
	return arm
}

// catTally counts, per category name, the customers decided while the
// tenant's model has fewer than policy.NumCats main categories; the
// learner adds the most frequent ones to the model (Learner.Learn).
type catTally struct {
	mu sync.Mutex
	n  map[string]int
}

// catTallyMax bounds the names a tally keeps.
const catTallyMax = 512

func (t *catTally) add(names []string) {
	if len(names) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	for _, n := range names {
		if _, ok := t.n[n]; ok || len(t.n) < catTallyMax {
			t.n[n]++
		}
	}
}

// top returns the most counted names not in have, most counted first (ties
// by name), at most k.
func (t *catTally) top(have []string, k int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var names []string
	for n := range t.n {
		if !slices.Contains(have, n) {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if t.n[a] != t.n[b] {
			return t.n[b] - t.n[a]
		}
		if a < b {
			return -1
		}
		return 1
	})
	return names[:min(k, len(names))]
}
