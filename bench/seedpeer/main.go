// Command seedpeer is the seed's bare idempotent handler, the yardstick
// `make bench` measures the gateway against (issue 17): net/http, a pgx
// pool of 16, and per new key two autocommit statements around an instant
// charge — INSERT … ON CONFLICT DO NOTHING, then an UPDATE storing the
// answer. A replay is the same INSERT (it inserts nothing) and one SELECT.
// The merchant is the X-Merchant-Id header; there is no auth, no ledger
// and no provider. It is a baseline, not a gateway: do not grow it.
//
//	seedpeer -addr 127.0.0.1:8090 -db postgres://…
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `CREATE TABLE IF NOT EXISTS seed_idempotency_keys (
  merchant_id text NOT NULL,
  key text NOT NULL,
  status text NOT NULL,
  status_code int,
  response bytea,
  PRIMARY KEY (merchant_id, key))`

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL")
	flag.Parse()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	http.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) { pay(pool, w, r) })
	log.Fatal(http.ListenAndServe(*addr, nil))
}

func pay(pool *pgxpool.Pool, w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	merchant, key := r.Header.Get("X-Merchant-Id"), r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	if err != nil || merchant == "" || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	tag, err := pool.Exec(ctx, `INSERT INTO seed_idempotency_keys (merchant_id, key, status) VALUES ($1, $2, 'in_progress') ON CONFLICT DO NOTHING`, merchant, key)
	if err != nil {
		http.Error(w, "db", http.StatusInternalServerError)
		return
	}
	if tag.RowsAffected() == 0 {
		var status string
		var code *int
		var resp []byte
		err := pool.QueryRow(ctx, `SELECT status, status_code, response FROM seed_idempotency_keys WHERE merchant_id = $1 AND key = $2`, merchant, key).Scan(&status, &code, &resp)
		switch {
		case err == pgx.ErrNoRows || (err == nil && status != "done"):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in use", http.StatusConflict)
		case err != nil:
			http.Error(w, "db", http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(*code)
			_, _ = w.Write(resp)
		}
		return
	}
	// The charge: instant, as the simulator at zero latency.
	resp := fmt.Appendf(nil, `{"id":"pay_%s","status":"succeeded","request_bytes":%d}`, key, len(body))
	if _, err := pool.Exec(ctx, `UPDATE seed_idempotency_keys SET status = 'done', status_code = 201, response = $3 WHERE merchant_id = $1 AND key = $2`, merchant, key, resp); err != nil {
		http.Error(w, "db", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(resp)
}
