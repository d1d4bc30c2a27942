package dbclock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/dbtest"
)

// The database's clock reads back as the time it is, and shifted times are
// shifted by what was asked.
func TestReadAndShift(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		now, err := dbclock.Read(db)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), now, 5*time.Second, "this machine and its database share a clock")

		for _, d := range []time.Duration{90 * time.Second, -5 * time.Minute, 1500 * time.Millisecond} {
			var raw any
			rows, err := db.Raw("SELECT ?", dbclock.Plus(db, d)).Rows()
			require.NoError(t, err)
			require.True(t, rows.Next())
			require.NoError(t, rows.Scan(&raw))
			require.NoError(t, rows.Close())
			got, err := dbclock.Parse(raw)
			require.NoError(t, err)
			require.WithinDuration(t, now.Add(d), got, 2*time.Second, "shifted by %v", d)
		}
	})
}

// Times written by Go (the driver's format) and by SQL compare in the
// right order in the same column, on both engines: on SQLite they are
// compared as text, so the two forms must agree.
func TestGoAndSQLTimesCompare(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		require.NoError(t, db.Exec("CREATE TABLE clock_probe (name TEXT PRIMARY KEY, at "+tsType(db)+" NOT NULL)").Error)
		now, err := dbclock.Read(db)
		require.NoError(t, err)
		// Go-written times around the database's now, with fractions that
		// the driver prints with trailing zeros dropped (or none at all).
		for name, at := range map[string]time.Time{
			"past_whole":   now.Add(-10 * time.Second).Truncate(time.Second),
			"past_tenth":   now.Add(-10 * time.Second).Truncate(100 * time.Millisecond),
			"past_micro":   now.Add(-2 * time.Second).Truncate(time.Microsecond),
			"future_whole": now.Add(10 * time.Second).Truncate(time.Second).Add(time.Second),
			"future_micro": now.Add(3 * time.Second).Truncate(time.Microsecond),
		} {
			require.NoError(t, db.Exec("INSERT INTO clock_probe (name, at) VALUES (?, ?)", name, at.UTC()).Error)
		}
		require.NoError(t, db.Exec("INSERT INTO clock_probe (name, at) VALUES ('sql_now', ?)", dbclock.Now(db)).Error)

		var past []string
		require.NoError(t, db.Raw("SELECT name FROM clock_probe WHERE at < ? ORDER BY name", dbclock.Minus(db, time.Second)).Scan(&past).Error)
		require.Equal(t, []string{"past_micro", "past_tenth", "past_whole"}, past)

		var future []string
		require.NoError(t, db.Raw("SELECT name FROM clock_probe WHERE at > ? ORDER BY name", dbclock.Plus(db, time.Second)).Scan(&future).Error)
		require.Equal(t, []string{"future_micro", "future_whole"}, future)

		// A time SQL wrote reads back as a time.Time through the column.
		var at time.Time
		require.NoError(t, db.Raw("SELECT at FROM clock_probe WHERE name = 'sql_now'").Row().Scan(&at))
		require.WithinDuration(t, now, at, 2*time.Second)

		var ages []float64
		require.NoError(t, db.Raw("SELECT ? FROM clock_probe WHERE name = 'past_whole'", dbclock.SecondsSince(db, "at")).Scan(&ages).Error)
		require.Len(t, ages, 1)
		require.InDelta(t, 10.5, ages[0], 2)
	})
}

func tsType(db *gorm.DB) string {
	if db.Dialector.Name() == "postgres" {
		return "TIMESTAMPTZ"
	}
	return "DATETIME"
}

// A clock whose local time is a minute off is brought in step with the
// database's by Sync.
func TestClockFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		c := dbclock.NewClock(func() time.Time { return time.Now().Add(-time.Minute) })
		require.WithinDuration(t, time.Now().Add(-time.Minute), c.Now(), time.Second, "no offset before Sync")
		off, err := c.Sync(context.Background(), db)
		require.NoError(t, err)
		require.InDelta(t, time.Minute.Seconds(), off.Seconds(), 1)
		require.WithinDuration(t, time.Now(), c.Now(), time.Second)
	})
}
