//go:build race

package client_test

// raceEnabled: the race detector slows every goroutine down several times,
// so wall-clock bounds are logged, not checked.
const raceEnabled = true
