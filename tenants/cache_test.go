package tenants

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A value read before a forget (a suspension, new secrets) must not be put
// back after it: it may predate the change.
func TestCacheDropsAValueReadBeforeAForget(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := newTTLCache[string](time.Second, func() time.Time { return now })

	_, ok, epoch := c.get("ten_1", "paystack")
	require.False(t, ok)
	c.forget("ten_1") // the admin changed the tenant meanwhile
	c.put("ten_1", "paystack", "stale", epoch)
	_, ok, epoch = c.get("ten_1", "paystack")
	require.False(t, ok, "the stale value was not cached")

	c.put("ten_1", "paystack", "fresh", epoch)
	v, ok, _ := c.get("ten_1", "paystack")
	require.True(t, ok)
	require.Equal(t, "fresh", v)

	now = now.Add(time.Second)
	_, ok, _ = c.get("ten_1", "paystack")
	require.False(t, ok, "expired after the TTL")
}
