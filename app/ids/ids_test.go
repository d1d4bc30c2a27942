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

// Index locality rests on this: ids made one after another sort in the
// order they were made.
func TestNewIncreasesWithinAProcess(t *testing.T) {
	t.Parallel()
	prev := ids.New("evt_")
	for i := range 100000 {
		id := ids.New("evt_")
		if id <= prev {
			t.Fatalf("id %d %q is not after the one before it, %q", i, id, prev)
		}
		prev = id
	}
}

// Made from many goroutines at once, each goroutine's ids still increase,
// and no id is made twice.
func TestNewConcurrently(t *testing.T) {
	t.Parallel()
	const n, workers = 20000, 4
	made := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				made[w] = append(made[w], ids.New("evt_"))
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, n*workers)
	for w, list := range made {
		for i, id := range list {
			if i > 0 && id <= list[i-1] {
				t.Fatalf("goroutine %d: id %d %q is not after %q", w, i, id, list[i-1])
			}
			if seen[id] {
				t.Fatalf("%q made twice", id)
			}
			seen[id] = true
		}
	}
}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		_ = ids.New("pay_")
	}
}
