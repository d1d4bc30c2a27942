package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommittedOpenAPIIsFresh: docs/openapi.json is what Convert makes of
// docs/swagger.json (make docs-check also regenerates swagger.json).
func TestCommittedOpenAPIIsFresh(t *testing.T) {
	t.Parallel()
	v2, err := os.ReadFile("../swagger.json")
	require.NoError(t, err)
	want, err := os.ReadFile("../openapi.json")
	require.NoError(t, err)
	got, err := Convert(v2)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "run make docs")
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		description string
		codes       []string
	}{
		{"invalid_client", []string{"invalid_client"}},
		{"card_declined: the provider declined (final; replayed on retries)", []string{"card_declined"}},
		{"invalid_request (with errors[]; key released), idempotency_key_missing, idempotency_key_invalid",
			[]string{"invalid_request", "idempotency_key_missing", "idempotency_key_invalid"}},
		{"internal (quote request_id)", []string{"internal"}},
		{"rate_limited (Retry-After: seconds)", []string{"rate_limited"}},
		{"database unreachable", nil},
		{"Unauthorized", nil},
		{"", nil},
	} {
		t.Run(tc.description, func(t *testing.T) {
			t.Parallel()
			codes, err := errorCodes(tc.description)
			if tc.codes == nil {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.codes, codes)
		})
	}
}

// doc is a small Swagger 2.0 document in swag's shape; change edits it.
func doc(t *testing.T, change func(op map[string]any, root map[string]any)) []byte {
	t.Helper()
	root := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(`{
	  "swagger": "2.0", "info": {"title": "t", "version": "1"}, "basePath": "/",
	  "tags": [{"name": "things"}],
	  "securityDefinitions": {
	    "Bearer": {"type": "apiKey", "in": "header", "name": "Authorization", "x-oas3-http-scheme": "bearer", "x-oas3-bearer-format": "JWT"},
	    "Key": {"type": "apiKey", "in": "header", "name": "X-Key"}
	  },
	  "definitions": {
	    "Thing": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "example": "th_1"}}},
	    "Problem": {"type": "object", "required": ["type", "title", "status", "code"], "properties": {
	      "type": {"type": "string", "example": "urn:x"}, "title": {"type": "string", "example": "Bad Request"},
	      "status": {"type": "integer", "example": 400}, "code": {"type": "string", "example": "invalid_request"},
	      "detail": {"type": "string", "example": "the request body is invalid"}}}
	  },
	  "paths": {"/things/{id}": {"get": {
	    "operationId": "getThing", "tags": ["things"],
	    "produces": ["application/json", "application/problem+json"],
	    "parameters": [{"name": "id", "in": "path", "required": true, "type": "string", "x-example": "th_1"}],
	    "responses": {
	      "200": {"description": "OK", "schema": {"$ref": "#/definitions/Thing"}},
	      "404": {"description": "thing_not_found, gone (deleted): no such thing", "schema": {"$ref": "#/definitions/Problem"}}
	    }}}}
	}`), &root))
	op := root["paths"].(map[string]any)["/things/{id}"].(map[string]any)["get"].(map[string]any)
	if change != nil {
		change(op, root)
	}
	b, err := json.Marshal(root)
	require.NoError(t, err)
	return b
}

func TestConvert(t *testing.T) {
	t.Parallel()
	out, err := Convert(doc(t, nil))
	require.NoError(t, err)
	var v3 struct {
		Components struct {
			SecuritySchemes map[string]map[string]any `json:"securitySchemes"`
		} `json:"components"`
		Paths map[string]map[string]struct {
			Security   *[]map[string]any `json:"security"`
			Parameters []map[string]any  `json:"parameters"`
			Responses  map[string]struct {
				Headers map[string]any `json:"headers"`
				Content map[string]struct {
					Example  map[string]any `json:"example"`
					Examples map[string]struct {
						Value map[string]any `json:"value"`
					} `json:"examples"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(out, &v3))
	require.Equal(t, map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}, v3.Components.SecuritySchemes["Bearer"])
	require.Equal(t, "apiKey", v3.Components.SecuritySchemes["Key"]["type"], "a scheme without the extension stays")

	op := v3.Paths["/things/{id}"]["get"]
	require.NotNil(t, op.Security, "public: security: []")
	require.Empty(t, *op.Security)
	require.Equal(t, "th_1", op.Parameters[0]["example"])
	require.NotContains(t, op.Parameters[0], "x-example")

	ok := op.Responses["200"]
	require.Contains(t, ok.Content, "application/json")
	require.NotContains(t, ok.Content, "application/problem+json")
	require.Contains(t, ok.Headers, "X-Request-Id")

	nf := op.Responses["404"]
	require.Len(t, nf.Content, 1)
	ex := nf.Content["application/problem+json"].Examples
	require.Len(t, ex, 2)
	require.Equal(t, map[string]any{"type": "urn:oncepay:error:gone", "title": "Not Found", "status": 404.0, "code": "gone"}, ex["gone"].Value)
	require.Equal(t, "thing_not_found", ex["thing_not_found"].Value["code"])
	require.Contains(t, nf.Headers, "X-Request-Id")

	// Optional security lists the empty requirement too.
	out, err = Convert(doc(t, func(op, _ map[string]any) {
		op["security"] = []any{map[string]any{"Bearer": []any{}}}
		op["x-security-optional"] = true
	}))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &v3))
	require.Equal(t, []map[string]any{{"Bearer": []any{}}, {}}, *v3.Paths["/things/{id}"]["get"].Security)
	require.NotContains(t, string(out), "x-security-optional")
}

// TestConvertRefuses: what the annotations must say, Convert insists on.
func TestConvertRefuses(t *testing.T) {
	t.Parallel()
	for name, change := range map[string]func(op, root map[string]any){
		"NoOperationID":      func(op, _ map[string]any) { delete(op, "operationId") },
		"NoTag":              func(op, _ map[string]any) { delete(op, "tags") },
		"UndeclaredTag":      func(op, _ map[string]any) { op["tags"] = []any{"other"} },
		"ErrorNotAProblem":   func(op, _ map[string]any) { op["produces"] = []any{"application/json"} },
		"ErrorWithoutCode":   func(op, _ map[string]any) { response(op, "404")["description"] = "Not Found" },
		"DefaultAnswer":      func(op, _ map[string]any) { op["responses"].(map[string]any)["default"] = response(op, "404") },
		"BearerNotInHeader":  func(_, root map[string]any) { scheme(root, "Bearer")["in"] = "query" },
		"BearerOnOtherField": func(_, root map[string]any) { scheme(root, "Bearer")["name"] = "X-Token" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Convert(doc(t, change))
			require.Error(t, err)
		})
	}
}

func response(op map[string]any, code string) map[string]any {
	return op["responses"].(map[string]any)[code].(map[string]any)
}

func scheme(root map[string]any, name string) map[string]any {
	return root["securityDefinitions"].(map[string]any)[name].(map[string]any)
}
