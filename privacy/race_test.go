//go:build race

package privacy

// raceEnabled: the race detector slows every goroutine down several times,
// which changes the shape a store's background compactions leave.
const raceEnabled = true
