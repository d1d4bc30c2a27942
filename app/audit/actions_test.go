package audit_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/audit"
)

// The action filter's documented values are the actions recorded: the
// enum is written by hand in the handler's doc comment, and a new action
// left out of it is one an operator's generated client cannot ask for.
func TestTheDocumentedActionsAreTheRecordedOnes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/swagger.json")
	require.NoError(t, err)
	var spec struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string   `json:"name"`
				Enum []string `json:"enum"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &spec))
	var documented []string
	for _, p := range spec.Paths["/admin/v1/audit-events"]["get"].Parameters {
		if p.Name == "action" {
			documented = p.Enum
		}
	}
	require.ElementsMatch(t, audit.Actions, documented)
}
