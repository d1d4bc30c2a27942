package main

import (
	"fmt"
	"slices"
	"strings"
)

// replayRound is one run of replays through the gateway and, right after,
// through the seed's bare handler.
type replayRound struct{ gateway, seed result }

// medianOf is the result of the round whose pick has the median rate.
func medianOf(rs []round, pick func(round) result) result {
	s := make([]result, len(rs))
	for i, r := range rs {
		s[i] = pick(r)
	}
	slices.SortFunc(s, cmpRate)
	return s[len(s)/2]
}

func medianReplay(rs []replayRound, pick func(replayRound) result) result {
	s := make([]result, len(rs))
	for i, r := range rs {
		s[i] = pick(r)
	}
	slices.SortFunc(s, cmpRate)
	return s[len(s)/2]
}

// medianFloat is the median of xs (0 when empty).
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// cpuPer is the serving process's CPU per request in µs (0 when unknown).
func cpuPer(r result) float64 {
	if !r.cpu.ok || len(r.latencies) == 0 {
		return 0
	}
	server, _, _ := r.cpu.perRequest(len(r.latencies))
	return float64(server.Nanoseconds()) / 1e3
}

// peerTable puts the gateway beside the seed's bare handler: each figure is
// the median over the rounds, and each ratio the median of the rounds'
// ratios (the two ran seconds apart in each round, so the machine's drift
// cancels in the ratio more than in either figure).
func peerTable(b *strings.Builder, rounds []round, replays []replayRound) {
	if len(rounds) == 0 || len(rounds[0].seed.latencies) == 0 {
		return
	}
	type row struct {
		name       string
		seed, gw   []float64
		better     string
		perRequest bool
	}
	rows := []row{
		{name: "new payments /s", better: "higher"},
		{name: "replays of one key /s", better: "higher"},
		{name: "CPU of the serving process per new payment (µs)", better: "lower", perRequest: true},
		{name: "CPU per replay (µs)", better: "lower", perRequest: true},
	}
	for _, r := range rounds {
		rows[0].seed, rows[0].gw = append(rows[0].seed, r.seed.rate()), append(rows[0].gw, r.new.rate())
		rows[2].seed, rows[2].gw = append(rows[2].seed, cpuPer(r.seed)), append(rows[2].gw, cpuPer(r.new))
	}
	for _, r := range replays {
		if len(r.seed.latencies) == 0 {
			continue
		}
		rows[1].seed, rows[1].gw = append(rows[1].seed, r.seed.rate()), append(rows[1].gw, r.gateway.rate())
		rows[3].seed, rows[3].gw = append(rows[3].seed, cpuPer(r.seed)), append(rows[3].gw, cpuPer(r.gateway))
	}
	b.WriteString("\nThe gateway beside the seed's bare handler (bench/seedpeer: net/http, pgx pool of 16, two autocommit statements per new key, INSERT + SELECT per replay, no auth), measured alternately in each round on the same database; medians over the rounds, the ratio the median of the rounds' ratios (gateway ÷ seed):\n\n")
	b.WriteString("| | seed's bare handler | gateway | ratio | per round |\n|---|---:|---:|---:|---|\n")
	for _, r := range rows {
		if len(r.seed) == 0 {
			continue
		}
		ratios := make([]float64, len(r.seed))
		var each []string
		for i := range r.seed {
			if r.seed[i] > 0 {
				ratios[i] = r.gw[i] / r.seed[i]
			}
			each = append(each, fmt.Sprintf("%.2f×", ratios[i]))
		}
		fmt.Fprintf(b, "| %s | %.0f | %.0f | **%.2f×** | %s |\n", r.name, medianFloat(r.seed), medianFloat(r.gw), medianFloat(ratios), strings.Join(each, " "))
	}
}
