//go:build race

package store

// raceEnabled: the race detector slows every goroutine down several times,
// which changes the pace of a load against the store's flushes and
// compactions.
const raceEnabled = true
