package app

import (
	"errors"
	"log/slog"

	"github.com/gofiber/fiber/v2"

	"github.com/oncepay/gateway/app/database"
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
}

// errorHandler is the one place an error becomes a response: a *Problem is
// rendered as is, Fiber's errors get their stable code, and anything else is
// a 500 whose real cause is logged (with the request id) but never sent.
func errorHandler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
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
			if fe.Code == fiber.StatusRequestEntityTooLarge {
				detail = "the request body exceeds 1 MiB"
			}
			if fe.Code >= 500 {
				detail = ""
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
			log.ErrorContext(c.UserContext(), "database unavailable",
				slog.String("request_id", problem.RequestID(c)), slog.String("path", c.Route().Path), slog.Any("error", err))
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
