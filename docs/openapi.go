package docs

// This file is hand-written; `make docs` generates openapi.json beside it.

import _ "embed"

// OpenAPI is openapi.json, the published OpenAPI 3 description of the API
// (docs/oas3gen converts it from swagger.json at `make docs` time). The
// gateway serves it at GET /openapi.json, and Swagger UI shows it.
//
//go:embed openapi.json
var OpenAPI []byte
