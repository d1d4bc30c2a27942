package reqjson

import (
	"mime"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
)

// Labelled checks the Content-Type of a request body about to be read as
// JSON: nil when the label allows it, a 415 unsupported_media_type when it
// says the body is something else — a form (curl's -d without a
// Content-Type header), a multipart upload, XML, or text in a charset that
// is not UTF-8 (RFC 8259 allows no other). An empty body, or one without a
// label, is not refused here, and neither is text/plain: browsers' fetch
// labels a string body so. Handlers call it where they decode, after
// authentication and after the idempotency key's lookup, so a retry of a
// finished request is answered from its key whatever its label.
func Labelled(contentType, body []byte) *problem.Problem {
	if len(body) == 0 || len(contentType) == 0 || JSONLabel(string(contentType)) {
		return nil
	}
	return problem.New(fiber.StatusUnsupportedMediaType, "unsupported_media_type",
		"the body must be JSON: send Content-Type: application/json (UTF-8)")
}

// JSONLabel reports whether a Content-Type value allows a JSON body:
// application/json, application/*+json or text/plain, in UTF-8 (or its
// subset US-ASCII) when it names a charset.
func JSONLabel(contentType string) bool {
	// What nearly every client sends, without the parser's allocations.
	if strings.EqualFold(contentType, "application/json") || strings.EqualFold(contentType, "application/json; charset=utf-8") {
		return true
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	if mt != "application/json" && mt != "text/plain" &&
		!(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return false
	}
	cs, ok := params["charset"]
	if !ok {
		return true
	}
	switch strings.ToLower(cs) {
	case "utf-8", "utf8", "us-ascii":
		return true
	}
	return false
}
