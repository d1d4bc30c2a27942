//go:build failpoint

package payments

import (
	"os"
	"syscall"
)

// failpoint kills the process with SIGKILL at the named point when
// ONCEPAY_FAILPOINT names it. It exists only in binaries built with
// -tags failpoint, for the crash-window tests: the gateway dies after the
// provider charged and before anything is recorded. (The one read of the
// environment outside config/, and only in test builds.)
func failpoint(name string) {
	if os.Getenv("ONCEPAY_FAILPOINT") == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late, but never run on
	}
}
