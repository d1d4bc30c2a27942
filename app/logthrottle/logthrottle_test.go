package logthrottle_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/logthrottle"
)

func TestARepeatedLineIsPassedOncePerInterval(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	log := slog.New(logthrottle.New(slog.NewTextHandler(&out, nil), time.Minute, func() time.Time { return now })).
		With("component", "producer")
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }

	for range 600 { // a minute of ten failed fetches a second
		log.Error("Error fetching jobs", "err", "connection refused")
		log.Warn("Error fetching jobs") // another level: its own line
		now = now.Add(100 * time.Millisecond)
	}
	log.Error("leadership lost") // another message: passed at once
	require.Len(t, lines(), 3, out.String())
	require.Contains(t, lines()[0], "level=ERROR")
	require.Contains(t, lines()[0], "component=producer")

	now = now.Add(time.Second)
	log.Error("Error fetching jobs", "err", "connection refused")
	require.Len(t, lines(), 4)
	require.Contains(t, lines()[3], "suppressed=599", "the next line says how many were dropped")
	require.Contains(t, lines()[3], "component=producer")

	now = now.Add(2 * time.Minute)
	log.Error("Error fetching jobs")
	require.Len(t, lines(), 5)
	require.NotContains(t, lines()[4], "suppressed", "none dropped since")
}
