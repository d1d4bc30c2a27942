//go:build failpoint

// Package failpoint kills the process at a named point, for the crash
// tests: only in binaries built with -tags failpoint.
package failpoint

import (
	"os"
	"syscall"
)

// Hit kills the process with SIGKILL when ONCEPAY_FAILPOINT names the
// point: a power cut at exactly that step (the gateway died after the
// provider charged and before anything is recorded; after an event
// committed and before it was handed to the queue…). The one read of the
// environment outside config/, and only in test builds.
func Hit(name string) {
	if os.Getenv("ONCEPAY_FAILPOINT") == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late, but never run on
	}
}
