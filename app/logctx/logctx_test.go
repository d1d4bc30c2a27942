package logctx_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/logctx"
)

func TestLinesCarryTheirRequestsIdentifiers(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(logctx.Handler(slog.NewTextHandler(&buf, nil)))
	ctx := logctx.With(context.Background(), slog.String("request_id", "req-1"))
	ctx = logctx.With(ctx, slog.String("idempotency_key", "k-1"))

	log.WarnContext(ctx, "left in progress", "payment_id", "pay_1")
	log.InfoContext(ctx, "access", "request_id", "req-1")
	log.Info("no request")
	log.With("merchant_id", "m").ErrorContext(ctx, "derived")
	log.With("idempotency_key", "sweep-key").InfoContext(ctx, "a logger that names its own key")
	log.WithGroup("payment").InfoContext(ctx, "grouped", "id", "pay_1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 6)
	require.Equal(t, 1, strings.Count(lines[4], "idempotency_key="), "said once, the logger's: %s", lines[4])
	require.Contains(t, lines[4], "idempotency_key=sweep-key")
	require.NotContains(t, lines[5], "request_id", "not nested in a group")
	require.Contains(t, lines[0], "payment_id=pay_1 request_id=req-1 idempotency_key=k-1")
	require.Equal(t, 1, strings.Count(lines[1], "request_id="), "said once")
	require.Contains(t, lines[1], "idempotency_key=k-1")
	require.NotContains(t, lines[2], "request_id")
	require.Contains(t, lines[3], "merchant_id=m request_id=req-1")
}
