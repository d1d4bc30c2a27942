package app

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/google/uuid"

	"github.com/oncepay/gateway/app/logctx"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/query"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/tenants"
)

// maxRequestIDLen bounds a client's X-Request-ID: longer ones are not
// accepted, so a client cannot make every log line carry its megabyte.
const maxRequestIDLen = 128

// refusedRequestIDKey holds, for the access log, the X-Request-ID a client
// sent that requestID did not accept.
type refusedRequestIDKey struct{}

// requestID names the request: the client's X-Request-ID when it is 1 to
// 128 visible ASCII characters (safe to log, echo and quote to support),
// else a new UUID. The id is echoed in X-Request-ID, stamped on problem
// bodies and logged; a refused client id is logged beside the new one, cut
// and escaped, so a client's own id still finds the request.
//
// Under /admin/ the id is always the gateway's own, the client's logged
// beside it: operator actions are audited with their request's id, which
// leads to the access log line (remote address, user agent), and a caller
// must not be able to give its changes another request's id.
func requestID() fiber.Handler {
	return func(c *fiber.Ctx) error {
		// Copied: Fiber's header strings alias a buffer it reuses, and the
		// id outlives the handler in stored replays and logs.
		sent := utils.CopyString(c.Get(fiber.HeaderXRequestID))
		id := sent
		if !validRequestID(sent) || adminPath(c.Path()) {
			id = uuid.NewString()
			if sent != "" {
				c.Locals(refusedRequestIDKey{}, loggableRequestID(sent))
			}
		}
		c.Locals("requestid", id)
		c.Set(fiber.HeaderXRequestID, id)
		c.SetUserContext(logctx.With(c.UserContext(), slog.String("request_id", id)))
		return c.Next()
	}
}

// adminPath reports whether path is under /admin/, in any case: Fiber
// routes paths case-insensitively, so /ADMIN/v1/tenants is the same route.
func adminPath(path string) bool {
	const prefix = "/admin/"
	return len(path) >= len(prefix) && strings.EqualFold(path[:len(prefix)], prefix)
}

// validRequestID: 1 to maxRequestIDLen visible ASCII characters (0x21-0x7E).
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// loggableRequestID is a refused id as the log shows it: its first
// maxRequestIDLen bytes, with anything but printable ASCII escaped.
func loggableRequestID(s string) string {
	if len(s) > maxRequestIDLen {
		s = s[:maxRequestIDLen]
	}
	q := strconv.QuoteToASCII(s)
	return q[1 : len(q)-1]
}

// recoverer turns a panic into a 500 problem; the stack goes to the log.
func recoverer(log *slog.Logger) fiber.Handler {
	return recover.New(recover.Config{
		EnableStackTrace: true,
		StackTraceHandler: func(c *fiber.Ctx, e any) {
			log.Error("panic", slog.String("request_id", problem.RequestID(c)), slog.Any("panic", e))
		},
	})
}

// deadline gives every request a context with a deadline: in Fiber v2
// UserContext is context.Background otherwise, and provider calls and
// queries must not outlive the request's budget.
func deadline(d time.Duration) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), d)
		defer cancel()
		c.SetUserContext(ctx)
		return c.Next()
	}
}

// accessLog writes one line per request with its id and, once the auth
// middleware ran, the merchant, its idempotency key and the Location of
// its answer. It logs the route, never bodies or other headers, so no
// secret or card data can reach the log.
func accessLog(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		status := c.Response().StatusCode()
		if err != nil {
			// The error handler runs after this middleware returns; ask it
			// now so the logged status is the one the client gets.
			if herr := c.App().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
			status = c.Response().StatusCode()
			err = nil
		}
		// A 500 is the gateway's own failure. A 502, 503 or 504 answers
		// for a dependency (a provider that refused or timed out, a
		// database out of reach) and is documented to the client; what
		// caused it is logged where it was seen (at error level for the
		// database), so the access line itself is a warning.
		level := slog.LevelInfo
		switch {
		case status == fiber.StatusBadGateway || status == fiber.StatusServiceUnavailable || status == fiber.StatusGatewayTimeout:
			level = slog.LevelWarn
		case status >= 500:
			level = slog.LevelError
		}
		if !log.Enabled(c.UserContext(), level) {
			return err // LOG_LEVEL above it: build nothing
		}
		attrs := []slog.Attr{
			slog.String("request_id", problem.RequestID(c)),
			slog.String("method", c.Method()),
			slog.String("path", c.Path()),
			slog.Int("status", status),
			slog.Duration("latency", time.Since(start)),
		}
		if refused, ok := c.Locals(refusedRequestIDKey{}).(string); ok {
			attrs = append(attrs, slog.String("client_request_id", refused))
		}
		if m := tenants.MerchantID(c); m != "" {
			attrs = append(attrs, slog.String("merchant_id", m))
		}
		// An operator's request names its caller: the audit event of a
		// change keeps the request's id, and this line where it came from.
		if adminPath(c.Path()) {
			attrs = append(attrs, slog.String("remote", c.IP()))
		}
		// What an on-call engineer is handed (a merchant's key, a payment
		// id) finds the request's line, and the line the payment: the key
		// as the gateway reads it (only a well-formed one, never other
		// header bytes) and the resource the answer names.
		if v := c.Request().Header.Peek(idempotency.HeaderKey); len(v) > 0 {
			if key, err := idempotency.NormalizeKey(string(v)); err == nil {
				attrs = append(attrs, slog.String("idempotency_key", key))
			}
		}
		if loc := c.Response().Header.Peek(fiber.HeaderLocation); len(loc) > 0 {
			attrs = append(attrs, slog.String("location", string(loc)))
		}
		log.LogAttrs(c.UserContext(), level, "request", attrs...)
		return err
	}
}

// refuseMalformed answers 400 to a request a parser took but HTTP does
// not allow: a control byte in its target (a raw NUL routed as an empty
// path, logged as one), or a body length read two ways
// (refuseAmbiguousLength).
func refuseMalformed() fiber.Handler {
	ambiguous := refuseAmbiguousLength()
	return func(c *fiber.Ctx) error {
		for _, b := range c.Request().Header.RequestURI() {
			if b < 0x20 || b == 0x7f {
				c.Context().SetConnectionClose()
				return problem.Write(c, problem.New(fiber.StatusBadRequest, "invalid_request",
					"the request target holds a control byte; percent-encode it"))
			}
		}
		return ambiguous(c)
	}
}

// refuseAmbiguousLength answers 400 to a request whose body's length two
// HTTP parsers could read differently: Content-Length beside
// Transfer-Encoding (RFC 9112 §6.1 lets a server refuse it; fasthttp reads
// the chunks and only closes the connection after, while a proxy in front
// may have read the length). That is how a request is smuggled past a
// proxy inside another's body; no honest client sends one. Content-Length
// sent twice never gets here: fasthttp refuses it while reading the
// headers, before it reads a body by either value.
func refuseAmbiguousLength() fiber.Handler {
	return func(c *fiber.Ctx) error {
		// The raw headers: fasthttp's parsed ones drop Content-Length
		// once Transfer-Encoding has decided the framing.
		raw := c.Request().Header.RawHeaders()
		length, chunked := false, false
		for len(raw) > 0 {
			var line []byte
			line, raw, _ = bytes.Cut(raw, []byte{'\n'})
			name, _, _ := bytes.Cut(line, []byte{':'})
			length = length || bytes.EqualFold(name, []byte(fiber.HeaderContentLength))
			chunked = chunked || bytes.EqualFold(name, []byte(fiber.HeaderTransferEncoding))
		}
		if length && chunked {
			c.Context().SetConnectionClose()
			return problem.Write(c, problem.New(fiber.StatusBadRequest, "invalid_request",
				"send Content-Length or Transfer-Encoding, not both"))
		}
		return c.Next()
	}
}

// refuseEncodings answers 415 to a request whose body is content-coded
// (gzip, deflate, br, or a stack of them), before anything reads it.
// Fiber inflates such a body on first read, with no limit on what it
// inflates to: a 1 KB gzip bomb would otherwise become gigabytes in
// memory behind the 1 MiB limit, which applies to the bytes on the wire.
// No client of the API and no provider's webhook compresses requests.
func refuseEncodings() fiber.Handler {
	return func(c *fiber.Ctx) error {
		for _, v := range c.Request().Header.PeekAll(fiber.HeaderContentEncoding) {
			for _, coding := range strings.Split(string(v), ",") {
				if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
					return problem.Write(c, problem.New(fiber.StatusUnsupportedMediaType, "unsupported_content_encoding",
						"request bodies must not be content-coded (send them without Content-Encoding)"))
				}
			}
		}
		return c.Next()
	}
}

// refuseTwoCredentials answers 400 to a request with Authorization sent
// more than once (tenants.TwoCredentials), on every route that does not
// answer it itself (sparedPath).
func refuseTwoCredentials() fiber.Handler {
	return func(c *fiber.Ctx) error {
		if sparedPath(c.Path()) {
			return c.Next()
		}
		if err := tenants.TwoCredentials(c); err != nil {
			return err
		}
		return c.Next()
	}
}

// refuseQueriesOnWrites answers 400, naming it, to a query parameter on a
// request that writes: no such route reads one, and the idempotency
// fingerprint does not hash the query, so a parameter a caller meant
// (?amount=…, ?dry_run=1) would be silently ignored and its retry
// replayed.
func refuseQueriesOnWrites() fiber.Handler {
	return func(c *fiber.Ctx) error {
		switch c.Method() {
		case fiber.MethodGet, fiber.MethodHead, fiber.MethodOptions:
			return c.Next()
		}
		if sparedPath(c.Path()) {
			return c.Next()
		}
		if err := query.Known(c); err != nil {
			return err
		}
		return c.Next()
	}
}

// sparedPath reports whether path is a route the two refusals above leave
// alone: a provider's webhook, whose URL — a query included — is what the
// merchant registered at the provider (refusing it would lose every event),
// and which carries no Authorization; and the token route, which refuses
// both itself, in OAuth's shape (RFC 6749's error member). Compared as
// Fiber routes, without regard to case.
func sparedPath(path string) bool {
	for _, prefix := range []string{"/v1/webhooks/", "/v1/auth/token"} {
		if len(path) >= len(prefix) && strings.EqualFold(path[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}
