package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

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
//
// Every run is audited, one that fails part way too: each step commits
// what it rewrote as it goes, so a run that stops at its second step has
// changed stored secrets, and the operator's action must be in the log
// with how far it got (completed false, failed_step) — not only the runs
// that finished.
func Reseal(ctx context.Context, cfg config.Config, log *slog.Logger) (ResealReport, error) {
	var rep ResealReport
	db, err := database.Open(cfg.DatabaseURL(), database.Options{MaxOpenConns: 2})
	if err != nil {
		return rep, err
	}
	defer database.Close(db)
	step, err := reseal(ctx, db, cfg, log, &rep)
	after := map[string]any{
		"completed":         err == nil,
		"provider_accounts": rep.Accounts, "webhook_endpoints": rep.Endpoints, "stored_answers": rep.Answers,
		"unreadable_provider_accounts": firstOf(rep.UnreadableAccounts), "unreadable_webhook_endpoints": firstOf(rep.UnreadableEndpoints),
		"unreadable_stored_answers": rep.UnreadableAnswers, "stale_client_secret_hashes": rep.StaleHashes,
	}
	if err != nil {
		after["failed_step"] = step
	}
	// An operator's action like any other: what it rewrote, and what it
	// found no key opens, in the audit log (counts and ids only). Recorded
	// even when the run was interrupted (its context ended).
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if aerr := audit.Record(actx, db, audit.Change{Action: audit.MasterKeyResealed, TargetType: "master_key", TargetID: "master_key",
		Command: true, After: after}); aerr != nil {
		return rep, errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return rep, err
}

// reseal runs Reseal's steps in order, filling rep as each ends; step
// names the one that failed.
func reseal(ctx context.Context, db *gorm.DB, cfg config.Config, log *slog.Logger, rep *ResealReport) (step string, err error) {
	ts, err := tenants.NewService(db, providers.NewRegistry(), tenantsConfig(cfg, log, time.Now))
	if err != nil {
		return "provider_accounts", err
	}
	// The step's report counts what it committed before it failed, too.
	tr, err := ts.Reseal(ctx)
	rep.Accounts, rep.UnreadableAccounts, rep.StaleHashes = tr.Accounts, tr.Unreadable, tr.StaleHashes
	if err != nil {
		return "provider_accounts", err
	}

	box, err := sealer(cfg, labelEndpointSecrets)
	if err != nil {
		return "webhook_endpoints", err
	}
	if rep.Endpoints, rep.UnreadableEndpoints, err = events.NewStore(db).Reseal(ctx, box); err != nil {
		return "webhook_endpoints", err
	}
	if box, err = sealer(cfg, labelAnswers); err != nil {
		return "stored_answers", err
	}
	if rep.Answers, rep.UnreadableAnswers, err = idempotency.NewStore(db).SealWith(box).Reseal(ctx); err != nil {
		return "stored_answers", fmt.Errorf("stored answers: %w", err)
	}
	return "", nil
}
