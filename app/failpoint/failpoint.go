//go:build !failpoint

// Package failpoint kills the process at a named point, for the crash
// tests: only in binaries built with -tags failpoint (failpoint_on.go);
// in real builds Hit compiles to nothing.
package failpoint

// Hit does nothing in real builds.
func Hit(string) {}
