//go:build !failpoint

package payments

// failpoint is compiled to nothing in real builds; see failpoint_on.go.
func failpoint(string) {}
