package paystacktest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// TestVendoredSpecMatchesShared keeps the vendored spec identical to the
// project's copy in shared/ (beside the repository) wherever that exists.
func TestVendoredSpecMatchesShared(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; filepath.Dir(dir) != dir; dir = filepath.Dir(dir) {
		shared, err := os.ReadFile(filepath.Join(dir, "shared", "specs", "paystack", "paystack.yaml"))
		if err != nil {
			continue
		}
		if !bytes.Equal(shared, paystacktest.Spec) {
			t.Fatalf("testdata/paystack.yaml differs from %s: copy it again", filepath.Join(dir, "shared/specs/paystack"))
		}
		return
	}
	t.Log("no shared/ beside the repository: nothing to compare with")
}
