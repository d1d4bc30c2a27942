package events

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/app/secretbox"
)

// Instances deployed together all boot on a database River has never
// seen: each migrates the queue, and none fails for another's migration.
func TestInstancesBootTogetherOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresURL(t)
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32), "test")
	require.NoError(t, err)
	const instances = 4
	var wg sync.WaitGroup
	errs := make([]error, instances)
	start := make(chan struct{})
	for i := range instances {
		db, err := database.Open(dsn, database.Options{MaxOpenConns: 4})
		require.NoError(t, err)
		t.Cleanup(func() { _ = database.Close(db) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = New(context.Background(), Config{DB: db, Box: box, Schedule: []time.Duration{time.Second}})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "instance %d", i)
	}
}

// `gateway migrate` creates River's tables with the schema's (MigrateQueue),
// so the instances find the queue ready; migrating again changes nothing.
func TestMigrateQueueBeforeTheInstances(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		require.False(t, db.Migrator().HasTable("river_job"))
		require.NoError(t, MigrateQueue(context.Background(), db, nil))
		require.True(t, db.Migrator().HasTable("river_job"))
		require.NoError(t, MigrateQueue(context.Background(), db, nil), "idempotent")
		box, err := secretbox.New(bytes.Repeat([]byte{7}, 32), "test")
		require.NoError(t, err)
		_, err = New(context.Background(), Config{DB: db, Box: box, Schedule: []time.Duration{time.Second}})
		require.NoError(t, err)
	})
}

// River's lines reach the gateway's log one level down (an ERROR stays an
// ERROR), each at most once a minute: the ERROR River logs for every
// fetch it fails while PostgreSQL is away, ten a second, does not drown
// the gateway's own lines.
func TestRiversLinesAreQuietAndThrottled(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := quiet(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	for range 50 {
		log.Error("producer: Error fetching jobs", "err", "dial tcp 127.0.0.1:5432: connect: connection refused")
		log.Warn("elector: leadership attempt failed")
		log.Info("producer: fetched 0 jobs")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	require.Contains(t, lines[0], "level=ERROR")
	require.Contains(t, lines[1], "level=INFO", "a WARN is one level down")
}
