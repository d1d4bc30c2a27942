// Package query checks a request's query string against the parameters
// its route reads, so that a misspelt or unsupported filter is a 400
// rather than a silently wider answer — an operator who searches by a
// parameter the route does not know must not get everyone's payments.
package query

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/problem"
)

// Known returns a 400 invalid_request naming the first parameter of c's
// query string that is none of known, or nil. A known name ending in "["
// stands for every parameter "name[…]" (metadata[order_id]).
//
// A parameter sent twice is refused too: the route would read one of the
// values, an answer narrower (or other) than the caller meant.
func Known(c *fiber.Ctx, known ...string) error {
	var bad, reason string
	seen := make(map[string]bool, 4)
	c.Context().QueryArgs().VisitAll(func(k, _ []byte) {
		name := string(k)
		switch {
		case bad != "":
		case !allowed(name, known):
			bad, reason = name, "is not a parameter of this route; it takes "+takes(known)
		case seen[name]:
			bad, reason = name, "is sent more than once; send it once"
		}
		seen[name] = true
	})
	if bad == "" {
		return nil
	}
	if len(bad) > 64 || !printable(bad) {
		bad = "query" // not echoed: it is not a name anyone documented
	}
	return problem.Invalid(problem.FieldError{Field: bad, Reason: reason})
}

func takes(known []string) string {
	if len(known) == 0 {
		return "none"
	}
	names := make([]string, len(known))
	for i, k := range known {
		if strings.HasSuffix(k, "[") {
			k += "key]" // as the caller writes it: metadata[key]
		}
		names[i] = k
	}
	return strings.Join(names, ", ")
}

func allowed(name string, known []string) bool {
	for _, k := range known {
		if name == k || strings.HasSuffix(k, "[") && strings.HasPrefix(name, k) && strings.HasSuffix(name, "]") {
			return true
		}
	}
	return false
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
