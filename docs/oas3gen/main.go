// Command oas3gen writes docs/openapi.json, the published OpenAPI 3
// description, from the Swagger 2.0 document swag generates from the
// annotations (docs/swagger.json). `make docs` runs it after swag.
//
// kin-openapi's openapi2conv does the conversion; Convert then applies what
// Swagger 2.0 cannot say, each rule driven by the annotations so the code
// stays the one source (see Convert).
//
//	go run ./docs/oas3gen -in docs/swagger.json -out docs/openapi.json
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	in := flag.String("in", "docs/swagger.json", "the Swagger 2.0 document swag wrote")
	out := flag.String("out", "docs/openapi.json", "where to write the OpenAPI 3 document")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "oas3gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	v2, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	v3, err := Convert(v2)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, v3, 0o644)
}
