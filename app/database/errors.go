package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err means the database could not be reached
// or did not answer in time — an outage to wait out (503 and Retry-After),
// not a fault of the request or of the gateway's code.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), // connection exception
			strings.HasPrefix(pg.Code, "53"),                           // insufficient resources
			pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03", // shutting down, starting up
			pg.Code == "57014", // statement cancelled (our deadline)
			pg.Code == "55P03": // lock_not_available: a row held too long
			return true
		}
		return false
	}
	var conn *pgconn.ConnectError
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.As(err, &conn) || errors.As(err, &nerr) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// BadInput reports whether err is PostgreSQL refusing text the gateway
// should have refused first: a NUL byte or bytes that are not UTF-8
// (22021 character_not_in_repertoire, 22P05 untranslatable_character).
// Validation at the edges keeps these from reaching the database; this is
// the net under it, so a missed case is still the client's 400, not a 500.
// Other data exceptions (a bad cast, an out-of-range value) can be the
// gateway's own bugs and stay 500s.
func BadInput(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "22021" || pg.Code == "22P05")
}
