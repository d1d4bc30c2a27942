package app

import (
	"errors"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/logthrottle"
	"github.com/oncepay/gateway/app/problem"
)

// fiberCodes gives Fiber's own errors (routing, body limits) stable codes.
var fiberCodes = map[int]string{
	fiber.StatusBadRequest:                  "invalid_request",
	fiber.StatusUnauthorized:                "unauthorized",
	fiber.StatusForbidden:                   "forbidden",
	fiber.StatusNotFound:                    "not_found",
	fiber.StatusMethodNotAllowed:            "method_not_allowed",
	fiber.StatusRequestEntityTooLarge:       "body_too_large",
	fiber.StatusRequestHeaderFieldsTooLarge: "headers_too_large",
	fiber.StatusUnsupportedMediaType:        "unsupported_media_type",
	fiber.StatusTooManyRequests:             "rate_limited",
	fiber.StatusRequestTimeout:              "request_timeout",
	fiber.StatusServiceUnavailable:          "unavailable",
	fiber.StatusNotImplemented:              "method_not_implemented",
}

// errorHandler is the one place an error becomes a response: a *Problem is
// rendered as is, Fiber's errors get their stable code, and anything else is
// a 500 whose real cause is logged (with the request id) but never sent.
func errorHandler(log *slog.Logger) fiber.ErrorHandler {
	// An outage fails every request: its ERROR once a minute, with a count
	// of the rest, says so without burying every other line.
	outage := slog.New(logthrottle.New(log.Handler(), time.Minute, nil))
	return func(c *fiber.Ctx, err error) error {
		// No request id: the HTTP server refused the request before any
		// middleware ran (a body over the limit, headers too large, bytes
		// that are not HTTP). Its answer still carries an id, and it is
		// logged once, in place of the access log's line.
		early := problem.RequestID(c) == ""
		if early {
			id := uuid.NewString()
			c.Locals("requestid", id)
			c.Set(fiber.HeaderXRequestID, id)
		}
		if p, ok := problem.As(err); ok {
			return problem.Write(c, p)
		}
		var fe *fiber.Error
		if errors.As(err, &fe) {
			code, ok := fiberCodes[fe.Code]
			if !ok {
				code = "http_error"
			}
			detail := fe.Message
			switch {
			case fe.Code == fiber.StatusRequestEntityTooLarge:
				detail = "the request body exceeds 1 MiB"
			case fe.Code == fiber.StatusNotFound && !early:
				// Fiber's "Cannot GET /path" echoes the caller's path.
				detail = "no route of the API has this path (the routes are at /swagger)"
			case fe.Code == fiber.StatusMethodNotAllowed && !early:
				// The method is one of the known ones (knownMethodsOnly);
				// Allow is the router's list for the path.
				if allow := c.GetRespHeader(fiber.HeaderAllow); allow != "" {
					detail = c.Method() + " is not allowed on this path; it takes " + allow
				}
			case fe.Code >= 500:
				detail = ""
			case early && fe.Code == fiber.StatusBadRequest:
				// The server's parse error quotes the request's bytes.
				detail = "the request is not well-formed HTTP/1.1"
			}
			if early {
				// Not the server's own message: it quotes the request's
				// bytes, an Authorization header among them.
				log.InfoContext(c.UserContext(), "request refused by the HTTP server",
					slog.String("request_id", problem.RequestID(c)), slog.Int("status", fe.Code), slog.String("code", code),
					slog.String("remote", c.IP()))
			}
			return problem.Write(c, problem.New(fe.Code, code, detail))
		}
		if database.BadInput(err) {
			log.WarnContext(c.UserContext(), "the database refused a value validation let through",
				slog.String("request_id", problem.RequestID(c)), slog.String("path", c.Route().Path), slog.Any("error", err))
			return problem.Write(c, problem.New(fiber.StatusBadRequest, "invalid_request",
				"the request holds a value that cannot be stored (NUL bytes, invalid UTF-8, or out of range)"))
		}
		if database.Unavailable(err) {
			outage.ErrorContext(c.UserContext(), "database unavailable",
				slog.String("request_id", problem.RequestID(c)), slog.String("path", c.Path()), slog.Any("error", err))
			return problem.Write(c, problem.New(fiber.StatusServiceUnavailable, "unavailable",
				"the gateway could not reach its database; retry later").WithRetryAfter(2))
		}
		log.ErrorContext(c.UserContext(), "unhandled error",
			slog.String("request_id", problem.RequestID(c)),
			slog.String("method", c.Method()),
			slog.String("path", c.Path()),
			slog.Any("error", err))
		return problem.Write(c, problem.New(fiber.StatusInternalServerError, "internal",
			"an internal error occurred; quote the request_id to support"))
	}
}

// knownMethods are the methods Fiber routes (its DefaultMethods); it
// answers any other itself, before the error handler, in plain text.
var knownMethods = map[string]bool{
	fiber.MethodGet: true, fiber.MethodHead: true, fiber.MethodPost: true, fiber.MethodPut: true,
	fiber.MethodDelete: true, fiber.MethodConnect: true, fiber.MethodOptions: true, fiber.MethodTrace: true,
	fiber.MethodPatch: true,
}

// knownMethodsOnly answers a request whose method Fiber does not know as
// every refusal is answered: a problem with a stable code and a request
// id, logged as the error handler logs the server's own refusals.
func knownMethodsOnly(log *slog.Logger, next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if knownMethods[string(ctx.Method())] {
			next(ctx)
			return
		}
		id := uuid.NewString()
		log.Info("request refused by the HTTP server", slog.String("request_id", id),
			slog.Int("status", fiber.StatusNotImplemented), slog.String("code", "method_not_implemented"),
			slog.String("remote", ctx.RemoteIP().String()))
		p := problem.New(fiber.StatusNotImplemented, "method_not_implemented", "the request's method is not one this server knows")
		ctx.Response.Header.Set(fiber.HeaderXRequestID, id)
		ctx.SetContentType(problem.ContentType)
		ctx.SetStatusCode(p.Status)
		ctx.SetBody(p.Body(id))
	}
}
