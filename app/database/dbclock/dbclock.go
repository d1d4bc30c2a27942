// Package dbclock writes "the database's time" into SQL statements, for
// both engines the gateway runs on.
//
// Why the database's clock: leases, staleness and review ages are compared
// across gateway instances. If each instance stamped and compared times
// with its own clock, two instances whose clocks disagree by a minute would
// disagree by a minute on who owns a key. Every such time is therefore
// written and tested inside the statement, with the one clock every
// instance shares.
//
// On PostgreSQL that is statement_timestamp() (the start of the statement:
// like now(), one value per statement, but it moves on within a
// transaction). On SQLite it is strftime over 'now', written in exactly the
// text form the Go driver writes a UTC time.Time ("2006-01-02
// 15:04:05.999999999-07:00", trailing zeros of the fraction dropped), so
// values written by Go and by SQL compare correctly as text and read back
// as time.Time. SQLite's clock has millisecond resolution; PostgreSQL's,
// microseconds.
package dbclock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// postgres is the database's current time on PostgreSQL.
const postgres = "statement_timestamp()"

// sqliteTime is the SQLite time of the time value at (a column, or 'now')
// shifted by the modifier bound to its one placeholder ('+1.5 seconds'),
// in the Go driver's text form.
func sqliteTime(at string) string {
	return `(rtrim(rtrim(strftime('%Y-%m-%d %H:%M:%f', ` + at + `, ?), '0'), '.') || '+00:00')`
}

func isPostgres(db *gorm.DB) bool { return db.Dialector.Name() == "postgres" }

// Now is the database's current time.
func Now(db *gorm.DB) clause.Expr { return Plus(db, 0) }

// Plus is the database's current time shifted by d (negative: in the past).
func Plus(db *gorm.DB, d time.Duration) clause.Expr {
	if isPostgres(db) {
		if d == 0 {
			return clause.Expr{SQL: postgres}
		}
		return clause.Expr{SQL: postgres + " + CAST(? AS interval)", Vars: []any{interval(d)}}
	}
	return clause.Expr{SQL: sqliteTime("'now'"), Vars: []any{interval(d)}}
}

// Minus is the database's current time less d: "d ago".
func Minus(db *gorm.DB, d time.Duration) clause.Expr { return Plus(db, -d) }

// Shift is the time in column (a trusted identifier, never input) moved by
// d, in the same stored form; NULL stays NULL.
func Shift(db *gorm.DB, column string, d time.Duration) clause.Expr {
	if isPostgres(db) {
		return clause.Expr{SQL: column + " + CAST(? AS interval)", Vars: []any{interval(d)}}
	}
	return clause.Expr{SQL: sqliteTime(column), Vars: []any{interval(d)}}
}

// SecondsSince is the number of seconds (a float) from the time in column
// (a trusted identifier, never input) to the database's current time.
func SecondsSince(db *gorm.DB, column string) clause.Expr {
	if isPostgres(db) {
		return clause.Expr{SQL: fmt.Sprintf("EXTRACT(EPOCH FROM (%s - %s))::float8", postgres, column)}
	}
	return clause.Expr{SQL: fmt.Sprintf("((julianday('now') - julianday(%s)) * 86400.0)", column)}
}

// interval is d as both engines read it: PostgreSQL as an interval literal,
// SQLite as a date-function modifier ("+1.500000 seconds").
func interval(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return sign + strconv.FormatFloat(d.Seconds(), 'f', 6, 64) + " seconds"
}

// Read returns the database's current time, for the few places that need
// it as a value (a test, a report) rather than inside a statement.
func Read(db *gorm.DB) (time.Time, error) {
	var raw any
	rows, err := db.Raw("SELECT ?", Now(db)).Rows()
	if err != nil {
		return time.Time{}, fmt.Errorf("dbclock: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return time.Time{}, fmt.Errorf("dbclock: no row: %w", rows.Err())
	}
	if err := rows.Scan(&raw); err != nil {
		return time.Time{}, fmt.Errorf("dbclock: %w", err)
	}
	return Parse(raw)
}

// Parse reads a time the database returned from an expression (which the
// SQLite driver hands back as text, since it has no column type to go by).
func Parse(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t.UTC(), nil
	case string:
		return parseText(t)
	case []byte:
		return parseText(string(t))
	default:
		return time.Time{}, fmt.Errorf("dbclock: a time cannot be %T", v)
	}
}

func parseText(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("dbclock: %q is not a time", s)
}

// Clock is an instance's clock kept in step with the database's: the
// local clock plus the offset last measured to the database. No lease or
// age is compared with it (those are tested inside statements); it stamps
// what an instance writes for people and for other instances — tokens'
// iat and exp, updated_at — so that instances whose own clocks disagree
// still stamp alike, and a token minted by one is valid on another.
type Clock struct {
	local  func() time.Time
	offset atomic.Int64 // nanoseconds to add to local
}

// NewClock returns a clock over local (time.Now when nil) with no offset
// until Sync.
func NewClock(local func() time.Time) *Clock {
	if local == nil {
		local = time.Now
	}
	return &Clock{local: local}
}

// Now is the local time corrected by the last measured offset.
func (c *Clock) Now() time.Time { return c.local().Add(time.Duration(c.offset.Load())) }

// Offset is the last measured difference database − local clock.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Sync measures the offset once: the database's time against the middle
// of the round trip that read it.
func (c *Clock) Sync(ctx context.Context, db *gorm.DB) (time.Duration, error) {
	before := c.local()
	at, err := Read(db.WithContext(ctx))
	after := c.local()
	if err != nil {
		return c.Offset(), err
	}
	off := at.Sub(before.Add(after.Sub(before) / 2))
	c.offset.Store(int64(off))
	return off, nil
}

// Run re-measures the offset every interval until ctx ends, so a local
// clock that steps or drifts is followed. Failures keep the last offset.
func (c *Clock) Run(ctx context.Context, db *gorm.DB, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = c.Sync(ctx, db)
		}
	}
}
