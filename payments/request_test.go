package payments

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/problem"
)

// A value of the wrong JSON type is blamed on its member, in JSON's words:
// a client's developer reads "email: must be a string", not "body: field
// email must be string" or Go's map[string]*string.
func TestAWrongTypeNamesItsMember(t *testing.T) {
	t.Parallel()
	create := func(fields string) []byte {
		return []byte(`{"amount":5000,"currency":"NGN","payment_method":"sim_success"` + fields + `}`)
	}
	for _, tc := range []struct {
		name  string
		parse func() *problem.Problem
		want  problem.FieldError
	}{
		{"EmailANumber", func() *problem.Problem { _, p := parseCreate(create(`,"email":123`)); return p },
			problem.FieldError{Field: "email", Reason: "must be a string"}},
		{"MetadataAnArray", func() *problem.Problem { _, p := parseCreate(create(`,"metadata":["x"]`)); return p },
			problem.FieldError{Field: "metadata", Reason: "must be an object of string values"}},
		{"MetadataValueANumber", func() *problem.Problem { _, p := parseCreate(create(`,"metadata":{"order":5}`)); return p },
			problem.FieldError{Field: "metadata.order", Reason: "must be a string"}},
		{"RefundReasonAnObject", func() *problem.Problem { _, p := parseRefund([]byte(`{"reason":{}}`)); return p },
			problem.FieldError{Field: "reason", Reason: "must be a string"}},
		{"NotAnObject", func() *problem.Problem { _, p := parseCreate([]byte(`[1]`)); return p },
			problem.FieldError{Field: "body", Reason: "must be a JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.parse()
			require.NotNil(t, p)
			require.Equal(t, "invalid_request", p.Code)
			require.Equal(t, []problem.FieldError{tc.want}, p.Errors)
		})
	}
}
