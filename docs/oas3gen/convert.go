package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

// Media types of answers.
const (
	jsonType    = "application/json"
	problemType = "application/problem+json"
)

// Extensions the annotations use to say what Swagger 2.0 cannot; Convert
// consumes them, so none reaches openapi.json.
const (
	// On an apiKey security scheme: write it as this HTTP scheme (bearer).
	extHTTPScheme = "x-oas3-http-scheme"
	// On the same scheme: the bearerFormat (JWT).
	extBearerFormat = "x-oas3-bearer-format"
	// On an operation (@x-security-optional true): its security may also be
	// met by nothing the schemes describe (client_secret_post).
	extSecurityOptional = "x-security-optional"
	// On a non-body parameter (extensions(x-example=…)): its example.
	extExample = "x-example"
)

// requestIDHeader is declared on every answer: the request-id middleware
// sets it on all of them.
const requestIDHeader = "X-Request-Id"

// Convert turns swag's Swagger 2.0 JSON into the OpenAPI 3.0 document the
// gateway publishes. openapi2conv converts; then:
//
//   - An apiKey scheme with x-oas3-http-scheme becomes that HTTP scheme
//     (bearer, with x-oas3-bearer-format): 2.0 has no bearer scheme, and
//     Swagger UI then adds "Bearer " itself.
//   - Every operation must have an operationId (@ID) and a declared tag.
//   - An operation without @Security is public: `security: []`. With
//     x-security-optional its requirements also list {} (none).
//   - A non-body parameter's x-example becomes its example (a form
//     parameter's, its property's). An empty one keeps Swagger UI from
//     filling the field with "string".
//   - 2xx answers never list application/problem+json; 4xx and 5xx list
//     only it. swag can only give every answer of an operation the same
//     types, which sends generated clients' decoded errors to fields nobody
//     reads.
//   - An error's description starts with its codes ("card_declined: …",
//     "invalid_request, unsupported_grant_type"); each code gets an example
//     built from the schema's examples with that code, status and title.
//   - Every answer declares X-Request-Id.
//
// The result is validated and rendered with sorted keys, so the same input
// always gives the same bytes (make docs-check relies on it).
func Convert(swagger2 []byte) ([]byte, error) {
	var v2 openapi2.T
	if err := json.Unmarshal(swagger2, &v2); err != nil {
		return nil, err
	}
	doc, err := openapi2conv.ToV3(&v2)
	if err != nil {
		return nil, err
	}
	if err := securitySchemes(doc); err != nil {
		return nil, err
	}
	if doc.Components.Headers == nil {
		doc.Components.Headers = openapi3.Headers{}
	}
	doc.Components.Headers[requestIDHeader] = &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
		Description: "The request's id, also the problem body's request_id: the client's own X-Request-Id when it is " +
			"1 to 128 visible ASCII characters, else one the gateway made. Quote it to support.",
		Required: true,
		Schema:   openapi3.NewStringSchema().WithMinLength(1).WithMaxLength(128).NewRef(),
	}}}
	eventObject(doc)
	tags := map[string]bool{}
	for _, t := range doc.Tags {
		tags[t.Name] = true
	}
	var errs []error
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			if err := operation(doc, op, tags); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", method, path, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the converted document is not valid OpenAPI 3: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func securitySchemes(doc *openapi3.T) error {
	for name, ref := range doc.Components.SecuritySchemes {
		s := ref.Value
		scheme, ok := s.Extensions[extHTTPScheme].(string)
		if !ok {
			continue
		}
		if s.Type != "apiKey" || s.In != "header" || s.Name != "Authorization" {
			return fmt.Errorf("security scheme %s: %s needs an apiKey in the Authorization header", name, extHTTPScheme)
		}
		s.Type, s.Scheme, s.In, s.Name = "http", scheme, "", ""
		if f, ok := s.Extensions[extBearerFormat].(string); ok {
			s.BearerFormat = f
		}
		delete(s.Extensions, extHTTPScheme)
		delete(s.Extensions, extBearerFormat)
	}
	return nil
}

func operation(doc *openapi3.T, op *openapi3.Operation, tags map[string]bool) error {
	if op.OperationID == "" {
		return errors.New("no operationId: add @ID to its annotations")
	}
	if len(op.Tags) == 0 {
		return errors.New("no tag: add @Tags")
	}
	for _, t := range op.Tags {
		if !tags[t] {
			return fmt.Errorf("tag %q is not declared with @tag.name in main.go", t)
		}
	}

	if op.Security == nil {
		op.Security = openapi3.NewSecurityRequirements() // public: `security: []`
	}
	if optional, _ := op.Extensions[extSecurityOptional].(bool); optional {
		*op.Security = append(*op.Security, openapi3.SecurityRequirement{})
	}
	delete(op.Extensions, extSecurityOptional)

	for _, p := range op.Parameters {
		if ex, ok := p.Value.Extensions[extExample]; ok {
			p.Value.Example = ex
			delete(p.Value.Extensions, extExample)
		}
	}
	if op.RequestBody != nil {
		delete(op.RequestBody.Value.Extensions, "x-originalParamName")
		for _, mt := range op.RequestBody.Value.Content {
			// Form parameters became this schema's properties, their
			// extensions with them.
			dropExtensions(mt.Schema, "x-formData-name")
			if s := mt.Schema.Value; s != nil && mt.Schema.Ref == "" {
				for _, p := range s.Properties {
					if ex, ok := p.Value.Extensions[extExample]; ok {
						p.Value.Example = ex
						delete(p.Value.Extensions, extExample)
					}
				}
			}
		}
	}

	requestID := &openapi3.HeaderRef{Ref: "#/components/headers/" + requestIDHeader, Value: doc.Components.Headers[requestIDHeader].Value}
	for code, ref := range op.Responses.Map() {
		status, err := strconv.Atoi(code)
		if err != nil {
			return fmt.Errorf("answer %q: document explicit statuses, not a default", code)
		}
		r := ref.Value
		if r.Headers == nil {
			r.Headers = openapi3.Headers{}
		}
		r.Headers[requestIDHeader] = requestID
		if status < 400 {
			delete(r.Content, problemType)
			continue
		}
		mt := r.Content.Get(problemType)
		if mt == nil {
			return fmt.Errorf("%d: an error must be application/problem+json (@Produce application/problem+json)", status)
		}
		r.Content = openapi3.Content{problemType: mt}
		codes, err := errorCodes(*r.Description)
		if err != nil {
			return fmt.Errorf("%d: %w", status, err)
		}
		if err := problemExamples(op, mt, status, codes); err != nil {
			return fmt.Errorf("%d: %w", status, err)
		}
	}
	return nil
}

var parenthetical = regexp.MustCompile(`\s*\([^)]*\)`)
var codeRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// errorCodes reads the codes an error description starts with: codes
// separated by commas, each maybe followed by a note in parentheses, then
// optionally a colon and prose.
func errorCodes(description string) ([]string, error) {
	head, _, _ := strings.Cut(parenthetical.ReplaceAllString(description, ""), ":")
	var codes []string
	for _, c := range strings.Split(head, ",") {
		c = strings.TrimSpace(c)
		if !codeRE.MatchString(c) {
			return nil, fmt.Errorf("the description %q does not start with its problem codes (\"code, code (note): prose\")", description)
		}
		codes = append(codes, c)
	}
	return codes, nil
}

// problemExamples gives mt one example per code: the schema's own examples
// with the code's type, code, status and title. Field errors appear only on
// invalid_request, naming a field the operation really has.
func problemExamples(op *openapi3.Operation, mt *openapi3.MediaType, status int, codes []string) error {
	mt.Example, mt.Examples = nil, nil
	for _, code := range codes {
		ex, ok := example(mt.Schema, 0).(map[string]any)
		if !ok {
			return errors.New("the problem schema gives no example object")
		}
		ex["type"] = "urn:oncepay:error:" + code
		ex["title"] = http.StatusText(status)
		ex["status"] = status
		ex["code"] = code
		delete(ex, "detail") // the schema's detail belongs to one code only
		delete(ex, "errors")
		if field, reason, ok := fieldError(op, mt.Schema); ok && code == "invalid_request" {
			ex["errors"] = []any{map[string]any{"field": field, "reason": reason}}
		}
		if p, ok := ex["payment"].(map[string]any); ok && ex["decline_code"] != nil {
			// A declined charge's payment has failed, for that reason.
			p["status"], p["failure_code"] = "failed", ex["decline_code"]
		}
		if len(codes) == 1 {
			mt.Example = ex
			break
		}
		if mt.Examples == nil {
			mt.Examples = openapi3.Examples{}
		}
		mt.Examples[code] = &openapi3.ExampleRef{Value: &openapi3.Example{Summary: code, Value: ex}}
	}
	return nil
}

// fieldError is an example field error for op: the first required (else
// first) property of its JSON body, else its first query parameter; the
// reason is the schema's example reason when it names that field.
func fieldError(op *openapi3.Operation, problem *openapi3.SchemaRef) (field, reason string, ok bool) {
	if op.RequestBody != nil {
		if mt := op.RequestBody.Value.Content.Get(jsonType); mt != nil && mt.Schema != nil && mt.Schema.Value != nil {
			s := mt.Schema.Value
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range s.Properties {
					if !yield(n) {
						return
					}
				}
			})
			switch {
			case len(s.Required) > 0:
				field = slices.Min(s.Required)
			case len(names) > 0:
				field = names[0]
			}
		}
	}
	if field == "" {
		for _, p := range op.Parameters {
			if p.Value.In == openapi3.ParameterInQuery {
				field = p.Value.Name
				break
			}
		}
	}
	if field == "" {
		return "", "", false
	}
	reason = "is invalid"
	if errs := problem.Value.Properties["errors"]; errs != nil && errs.Value.Items != nil {
		if fe, ok := example(errs.Value.Items, 0).(map[string]any); ok && fe["field"] == field {
			if r, ok := fe["reason"].(string); ok {
				reason = r
			}
		}
	}
	return field, reason, true
}

// example builds an example value of s from the examples its properties
// carry (nil when s gives none).
func example(s *openapi3.SchemaRef, depth int) any {
	if s == nil || s.Value == nil || depth > 8 {
		return nil
	}
	v := s.Value
	switch {
	case v.Example != nil:
		return v.Example
	case len(v.AllOf) == 1:
		return example(v.AllOf[0], depth+1)
	case len(v.Enum) > 0:
		return v.Enum[0]
	case v.Type.Is("object"):
		m := map[string]any{}
		for name, p := range v.Properties {
			if e := example(p, depth+1); e != nil {
				m[name] = e
			}
		}
		return m
	case v.Type.Is("array"):
		if e := example(v.Items, depth+1); e != nil {
			return []any{e}
		}
		return []any{}
	}
	return nil
}

func dropExtensions(s *openapi3.SchemaRef, names ...string) {
	if s == nil || s.Value == nil || s.Ref != "" {
		return
	}
	for _, n := range names {
		delete(s.Value.Extensions, n)
	}
	for _, p := range s.Value.Properties {
		dropExtensions(p, names...)
	}
}

// eventObject types an event's data.object as what it is, a Payment or a
// Refund (one of; the event's type says which), which Swagger 2.0 cannot
// say, and describes how an event is delivered.
func eventObject(doc *openapi3.T) {
	ev, payment, refund := doc.Components.Schemas["Event"], doc.Components.Schemas["Payment"], doc.Components.Schemas["Refund"]
	if ev == nil || ev.Value == nil || payment == nil || refund == nil {
		return
	}
	object := &openapi3.Schema{OneOf: openapi3.SchemaRefs{
		openapi3.NewSchemaRef("#/components/schemas/Payment", payment.Value),
		openapi3.NewSchemaRef("#/components/schemas/Refund", refund.Value),
	}, Description: "The payment (payment.* events) or the refund (refund.* events) as GET returns it, at the transition."}
	data := openapi3.NewObjectSchema().WithPropertyRef("object", object.NewRef())
	data.Required = []string{"object"}
	ev.Value.Properties["data"] = data.NewRef()
	ev.Value.Description = "One state transition of a payment or refund. Delivered (Standard Webhooks) as the POST body to " +
		"every endpoint that takes its type, with the headers webhook-id (the event's id, the same on every attempt), " +
		"webhook-timestamp (unix seconds) and webhook-signature (space-separated \"v1,<base64 HMAC-SHA256 of " +
		"id.timestamp.body>\", one per live secret)."
}
