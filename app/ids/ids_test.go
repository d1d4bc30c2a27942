package ids_test

import (
	"regexp"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/oncepay/gateway/app/ids"
)

func TestNewIsAPrefixAndAVersion7UUIDInHex(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^pay_[0-9a-f]{32}$`)
	id := ids.New("pay_")
	if !shape.MatchString(id) {
		t.Fatalf("New(pay_) = %q, want pay_ and 32 hex digits", id)
	}
	u, err := uuid.Parse(id[len("pay_"):])
	if err != nil {
		t.Fatalf("%q does not hold a UUID: %v", id, err)
	}
	if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("%q is version %d, variant %v; want version 7 of RFC 9562", id, u.Version(), u.Variant())
	}
}

// Index locality rests on this: ids made one after another, even from
// many goroutines at once, sort in the order they were made.
func TestNewIncreasesWithinAProcess(t *testing.T) {
	t.Parallel()
	const n = 10000
	var mu sync.Mutex
	var wg sync.WaitGroup
	made := make([]string, 0, 4*n)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				mu.Lock()
				made = append(made, ids.New("evt_"))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(made); i++ {
		if made[i] <= made[i-1] {
			t.Fatalf("id %d %q is not after id %d %q", i, made[i], i-1, made[i-1])
		}
	}
}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		_ = ids.New("pay_")
	}
}
