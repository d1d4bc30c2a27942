package payments_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/oncepay/gateway/app/apptest"
)

// The benchmarks drive the real app over loopback HTTP on PostgreSQL with
// the simulator at zero latency: what they measure is the gateway's own
// cost per payment (HTTP, auth, claim, ledger, completion).

func BenchmarkCreatePayment(b *testing.B) {
	g := apptest.Start(b)
	m := g.Onboard(nil)
	payload := raw(body("sim_success"))
	var seq atomic.Int64
	// A thousand payments, then ANALYZE, as autovacuum would have done by
	// then: a generic plan cached on a never-analyzed table of a few
	// hundred rows can address the payment by a merchant-only index and
	// walk the merchant's payments on every completion (bench/internal/rig's
	// Analyze), which would measure that accident, not the gateway.
	for range 1000 {
		if r := g.Pay(m, fmt.Sprintf("bench-warm-%d", seq.Add(1)), payload); r.StatusCode != http.StatusCreated {
			b.Fatalf("warm up: %d", r.StatusCode)
		}
	}
	if err := g.App.DB().Exec("ANALYZE").Error; err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(8) // 8×GOMAXPROCS concurrent clients, as a merchant fleet would be
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("bench-new-%d", seq.Add(1))
			r, err := g.TryPay(m, key, payload)
			if err != nil || r.StatusCode != http.StatusCreated {
				b.Errorf("create: %v %d", err, r.StatusCode)
				return
			}
		}
	})
}

func BenchmarkReplayPayment(b *testing.B) {
	g := apptest.Start(b)
	m := g.Onboard(nil)
	payload := raw(body("sim_success"))
	if r := g.Pay(m, "bench-replay", payload); r.StatusCode != http.StatusCreated {
		b.Fatalf("seed: %d", r.StatusCode)
	}
	b.ReportAllocs()
	b.SetParallelism(8) // 8×GOMAXPROCS concurrent clients, as a merchant fleet would be
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := g.TryPay(m, "bench-replay", payload)
			if err != nil || r.Header.Get("Idempotent-Replayed") != "true" {
				b.Errorf("replay: %v", err)
				return
			}
		}
	})
}
