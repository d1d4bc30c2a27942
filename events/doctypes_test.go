package events

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCreateEndpointRequestDocumentsEndpointRequest: the create route's
// documented body (CreateEndpointRequest, url required) names the fields
// the handler decodes (EndpointRequest), and only url is required in it.
func TestCreateEndpointRequestDocumentsEndpointRequest(t *testing.T) {
	t.Parallel()
	fields := func(v any) map[string]bool {
		out := map[string]bool{}
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			name, opts, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			out[name] = opts != "omitempty" // required under swag's --requiredByDefault
		}
		return out
	}
	documented := fields(CreateEndpointRequest{})
	decoded := fields(EndpointRequest{})
	require.Len(t, documented, len(decoded))
	for name := range decoded {
		require.Contains(t, documented, name)
		require.Equal(t, name == "url", documented[name], "%s: only url is required on create", name)
		require.False(t, decoded[name], "%s: every field of an update is optional", name)
	}
}
