package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/config"
	"github.com/oncepay/gateway/events"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/tenants"
)

// ResealReport is what `gateway reseal` did: how many sealed secrets of
// each kind it moved to MASTER_KEY, and what still needs
// MASTER_KEY_PREVIOUS or a person.
type ResealReport struct {
	Accounts  int // provider accounts' secrets
	Endpoints int // webhook endpoints' signing secrets
	Answers   int // stored answers that show a secret

	UnreadableAccounts  []string // tenant/provider: open under neither key
	UnreadableEndpoints []string // merchant/endpoint: open under neither key
	UnreadableAnswers   int      // refused on replay either way; purged with their keys
	// StaleHashes is the live client credentials still hashed under the
	// previous key: each is rehashed at its client's next token request.
	StaleHashes int
}

// Retirable reports whether MASTER_KEY_PREVIOUS can now be removed:
// nothing that opens still needs it.
func (r ResealReport) Retirable() bool { return r.StaleHashes == 0 }

// firstOf is at most the first 100 of ids, for an audit row: the command's
// own output lists them all.
func firstOf(ids []string) []string { return ids[:min(len(ids), 100)] }

// Reseal seals, under MASTER_KEY, every secret the gateway keeps that
// MASTER_KEY_PREVIOUS sealed, for the second step of a key rotation
// (README, "Rotating MASTER_KEY"). It runs beside serving instances, on
// the migrated database, and can be run again at any time.
func Reseal(ctx context.Context, cfg config.Config, log *slog.Logger) (ResealReport, error) {
	var rep ResealReport
	db, err := database.Open(cfg.DatabaseURL(), database.Options{MaxOpenConns: 2})
	if err != nil {
		return rep, err
	}
	defer database.Close(db)
	ts, err := tenants.NewService(db, providers.NewRegistry(), tenantsConfig(cfg, log, time.Now))
	if err != nil {
		return rep, err
	}
	tr, err := ts.Reseal(ctx)
	if err != nil {
		return rep, err
	}
	rep.Accounts, rep.UnreadableAccounts, rep.StaleHashes = tr.Accounts, tr.Unreadable, tr.StaleHashes

	box, err := sealer(cfg, labelEndpointSecrets)
	if err != nil {
		return rep, err
	}
	if rep.Endpoints, rep.UnreadableEndpoints, err = events.NewStore(db).Reseal(ctx, box); err != nil {
		return rep, err
	}
	if box, err = sealer(cfg, labelAnswers); err != nil {
		return rep, err
	}
	if rep.Answers, rep.UnreadableAnswers, err = idempotency.NewStore(db).SealWith(box).Reseal(ctx); err != nil {
		return rep, fmt.Errorf("stored answers: %w", err)
	}
	// An operator's action like any other: what it rewrote, and what it
	// found no key opens, in the audit log (counts and ids only).
	err = audit.Record(ctx, db, audit.Change{Action: audit.MasterKeyResealed, TargetType: "master_key", TargetID: "master_key",
		Command: true, After: map[string]any{
			"provider_accounts": rep.Accounts, "webhook_endpoints": rep.Endpoints, "stored_answers": rep.Answers,
			"unreadable_provider_accounts": firstOf(rep.UnreadableAccounts), "unreadable_webhook_endpoints": firstOf(rep.UnreadableEndpoints),
			"unreadable_stored_answers": rep.UnreadableAnswers, "stale_client_secret_hashes": rep.StaleHashes,
		}})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	return rep, nil
}
