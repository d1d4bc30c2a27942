package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// proxy stands between the clients and the gateway like a mobile network
// or a flaky load balancer: it forwards every request, waits for the
// gateway's whole answer, and then, for a share of them, cuts the client's
// connection instead of passing the answer on. The gateway did the work;
// the client must retry with the same key and get the same answer.
type proxy struct {
	target   string // gateway base URL
	dropRate float64
	client   *http.Client
	// tamperEvery, when positive, alters every n-th replayed answer (one
	// space more in its body), as an instance that answered a key
	// otherwise than another would: to check that the audit catches it.
	tamperEvery int64
	replays     atomic.Int64

	forwarded atomic.Int64
	dropped   atomic.Int64
	failed    atomic.Int64 // no instance reached (killed, or the balancer down): 502/503
}

func newProxy(target string, dropRate float64) *proxy {
	return &proxy{target: target, dropRate: dropRate, client: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
	}}
}

func (p *proxy) serve(ln net.Listener) error {
	return (&http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		// A gateway that is down looks like a load balancer's 502.
		p.failed.Add(1)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		p.failed.Add(1)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	p.forwarded.Add(1)
	if resp.Header.Get(instanceHeader) == "" && resp.StatusCode >= http.StatusBadGateway {
		// The balancer's own 502/503: no instance could take it.
		p.failed.Add(1)
	}
	if rand.Float64() < p.dropRate {
		p.dropped.Add(1)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	if p.tamperEvery > 0 && resp.Header.Get("Idempotent-Replayed") == "true" &&
		p.replays.Add(1)%p.tamperEvery == 0 && len(answer) > 1 {
		answer = append(answer[:len(answer)-1:len(answer)-1], ' ', answer[len(answer)-1])
		resp.Header.Del("Content-Length")
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}
