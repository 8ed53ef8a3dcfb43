//go:build !policytune

package policy

func applyTuneEnv(*Config) {}
