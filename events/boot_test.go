package events

import (
	"bytes"
	"context"
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
