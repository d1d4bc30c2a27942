package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/ids"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/idempotency"
)

// rotationOverlap is how long an old secret keeps signing beside the new.
const rotationOverlap = 24 * time.Hour

// EndpointView is an endpoint as the API shows it: never its secret (but
// once, on create and rotation).
type EndpointView struct {
	ID           string     `json:"id" example:"we_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	Object       string     `json:"object" example:"webhook_endpoint"`
	URL          string     `json:"url" example:"https://shop.example.com/oncepay/webhooks"`
	Events       []string   `json:"events" example:"payment.succeeded,payment.failed"`
	Description  string     `json:"description,omitempty" example:"Order service"`
	Disabled     bool       `json:"disabled" example:"false"`
	FailingSince *time.Time `json:"failing_since,omitempty" format:"date-time"`
	CreatedAt    time.Time  `json:"created_at" format:"date-time"`
	UpdatedAt    time.Time  `json:"updated_at" format:"date-time"`
	// Secret is shown once: in the answer that created or rotated it.
	Secret string `json:"secret,omitempty" example:"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`
} // @name WebhookEndpoint

func (e *Endpoint) view() EndpointView {
	t := e.types()
	if t == nil {
		t = []string{}
	}
	return EndpointView{ID: e.ID, Object: "webhook_endpoint", URL: e.URL, Events: t, Description: e.Description,
		Disabled: e.DisabledAt != nil, FailingSince: e.FailingSince, CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC()}
}

// EndpointRequest is the body of a create (url required) or an update
// (every field optional). The create route documents its body as
// CreateEndpointRequest; both decode into this type.
type EndpointRequest struct {
	URL         *string   `json:"url,omitempty" example:"https://shop.example.com/oncepay/webhooks"`
	Events      *[]string `json:"events,omitempty" example:"payment.succeeded,payment.failed"`
	Description *string   `json:"description,omitempty" example:"Order service"`
	Disabled    *bool     `json:"disabled,omitempty" example:"false"`
} // @name WebhookEndpointRequest

// CreateEndpointRequest documents the body of POST /v1/webhook_endpoints:
// EndpointRequest with url required (Service.check answers 400 "url: is
// required" without it). It is never decoded into: the handler reads
// EndpointRequest, so the wire behaviour is the update's fields with the
// create's checks.
type CreateEndpointRequest struct {
	// URL that receives the deliveries: https in production, and not a
	// private, loopback or link-local address there.
	URL string `json:"url" example:"https://shop.example.com/oncepay/webhooks"`
	// Events: the types to receive; empty or absent: all.
	Events []string `json:"events,omitempty" example:"payment.succeeded,payment.failed"`
	// Description: one line of printable text, at most 200 characters.
	Description string `json:"description,omitempty" example:"Order service"`
	// Disabled: only false (or absent); a new endpoint is enabled.
	Disabled bool `json:"disabled,omitempty" example:"false"`
} // @name CreateWebhookEndpointRequest

func invalid(field, reason string) error {
	return problem.Invalid(problem.FieldError{Field: field, Reason: reason})
}

// check validates the request's fields; create requires url.
// now is the time an endpoint's change is stamped with, in microseconds:
// what PostgreSQL keeps, so the answer that made the change shows the
// same created_at and updated_at as every GET after it.
func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Microsecond) }

func (s *Service) check(req EndpointRequest, create bool) error {
	if create && req.URL == nil {
		return invalid("url", "is required")
	}
	if req.URL != nil {
		if err := checkURL(*req.URL, s.cfg.Production); err != nil {
			return invalid("url", err.Error())
		}
	}
	if req.Events != nil {
		if len(*req.Events) > len(Types) {
			return invalid("events", "lists a type twice")
		}
		for _, t := range *req.Events {
			if !known(t) {
				return invalid("events", "must be event types: "+strings.Join(Types, ", "))
			}
		}
	}
	if req.Description != nil && (utf8.RuneCountInString(*req.Description) > 200 || !utf8.ValidString(*req.Description) ||
		strings.IndexFunc(*req.Description, unicode.IsControl) >= 0) {
		return invalid("description", "must be one line of printable text of at most 200 characters")
	}
	if create && req.Disabled != nil && *req.Disabled {
		return invalid("disabled", "a new endpoint is enabled")
	}
	return nil
}

func eventsJSON(t *[]string) string {
	if t == nil || len(*t) == 0 {
		return "[]"
	}
	sorted := slices.Clone(*t)
	slices.Sort(sorted)
	b, _ := json.Marshal(slices.Compact(sorted))
	return string(b)
}

// answer is the stored answer of a mutating endpoint route.
func answer(status int, v any) (idempotency.Response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return idempotency.Response{}, err
	}
	return idempotency.Response{Status: status, Header: map[string]string{fiber.HeaderContentType: fiber.MIMEApplicationJSON}, Body: body}, nil
}

// secretAnswer marks an answer that shows a secret: the key's stored copy is
// encrypted like the secret itself.
// Like every answer that shows a secret, it must not be kept by a cache
// on the way (its replays carry the same headers).
func secretAnswer(r idempotency.Response, err error) (idempotency.Response, error) {
	r.Sealed = true
	if r.Header != nil {
		r.Header[fiber.HeaderCacheControl] = "no-store"
	}
	return r, err
}

// mutate runs change in one transaction with the claim's completion, so an
// endpoint's change and the key's stored answer commit together; a
// refusal (a problem) releases the claim.
func (s *Service) mutate(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim,
	change func(tx *gorm.DB) (idempotency.Response, error)) (idempotency.Response, error) {
	var out idempotency.Response
	err := keys.Persist(ctx, claim, nil)
	if err == nil {
		err = s.cfg.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			if out, err = change(tx); err != nil {
				return err
			}
			return keys.Complete(ctx, tx, claim, out)
		})
	}
	if _, ok := problem.As(err); ok {
		if rerr := keys.Release(ctx, claim); rerr != nil && !errors.Is(rerr, idempotency.ErrLostClaim) {
			return out, errors.Join(err, rerr)
		}
	}
	if errors.Is(err, idempotency.ErrLostClaim) {
		return out, problem.New(fiber.StatusConflict, "idempotency_key_in_use", "another request took this key over; retry").WithRetryAfter(1)
	}
	return out, err
}

// maxEndpoints is how many webhook endpoints one merchant may have.
const maxEndpoints = 16

var errEndpointNotFound = problem.New(fiber.StatusNotFound, "webhook_endpoint_not_found", "no such webhook endpoint")

// CreateEndpoint adds a merchant's endpoint; the answer shows its secret.
func (s *Service) CreateEndpoint(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, merchantID string, req EndpointRequest) (idempotency.Response, error) {
	if err := s.check(req, true); err != nil {
		return idempotency.Response{}, releaseWith(ctx, keys, claim, err)
	}
	return s.mutate(ctx, keys, claim, func(tx *gorm.DB) (idempotency.Response, error) {
		if err := s.store.lockEndpoints(ctx, tx, merchantID); err != nil {
			return idempotency.Response{}, err
		}
		if eps, err := s.store.endpoints(ctx, tx, merchantID); err != nil {
			return idempotency.Response{}, err
		} else if len(eps) >= maxEndpoints {
			return idempotency.Response{}, invalid("url", fmt.Sprintf("a merchant has at most %d endpoints", maxEndpoints))
		}
		now := s.now()
		secret := NewSecret()
		ep := Endpoint{MerchantID: merchantID, ID: ids.New("we_"), URL: *req.URL,
			Events: eventsJSON(req.Events), CreatedAt: now, UpdatedAt: now}
		if req.Description != nil {
			ep.Description = *req.Description
		}
		ep.Secret = s.cfg.Box.Seal(secretAAD(merchantID, ep.ID), []byte(secret))
		if err := s.store.insertEndpoint(ctx, tx, &ep); err != nil {
			return idempotency.Response{}, err
		}
		v := ep.view()
		v.Secret = secret
		return secretAnswer(answer(fiber.StatusCreated, v))
	})
}

// UpdateEndpoint changes url, events, description or disabled.
func (s *Service) UpdateEndpoint(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, merchantID, id string, req EndpointRequest) (idempotency.Response, error) {
	if err := s.check(req, false); err != nil {
		return idempotency.Response{}, releaseWith(ctx, keys, claim, err)
	}
	return s.mutate(ctx, keys, claim, func(tx *gorm.DB) (idempotency.Response, error) {
		now := s.now()
		cols := map[string]any{"updated_at": now}
		if req.URL != nil {
			cols["url"] = *req.URL
		}
		if req.Events != nil {
			cols["events"] = eventsJSON(req.Events)
		}
		if req.Description != nil {
			cols["description"] = *req.Description
		}
		if req.Disabled != nil {
			before, err := s.store.endpoint(ctx, tx, merchantID, id)
			if errors.Is(err, ErrNotFound) {
				return idempotency.Response{}, errEndpointNotFound
			} else if err != nil {
				return idempotency.Response{}, err
			}
			switch {
			case *req.Disabled && before.DisabledAt == nil:
				cols["disabled_at"] = now
			case !*req.Disabled && before.DisabledAt != nil:
				// Re-enabled: a fresh start. (An enabled endpoint's
				// streak is not the merchant's to clear.)
				cols["disabled_at"], cols["failing_since"] = nil, nil
			}
		}
		if err := s.store.updateEndpoint(ctx, tx, merchantID, id, cols); errors.Is(err, ErrNotFound) {
			return idempotency.Response{}, errEndpointNotFound
		} else if err != nil {
			return idempotency.Response{}, err
		}
		ep, err := s.store.endpoint(ctx, tx, merchantID, id)
		if err != nil {
			return idempotency.Response{}, err
		}
		return answer(fiber.StatusOK, ep.view())
	})
}

// Deleted is the answer of a delete.
type Deleted struct {
	ID      string `json:"id" example:"we_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	Object  string `json:"object" example:"webhook_endpoint"`
	Deleted bool   `json:"deleted" example:"true"`
} // @name WebhookEndpointDeleted

// DeleteEndpoint removes an endpoint; its pending deliveries are skipped.
func (s *Service) DeleteEndpoint(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, merchantID, id string) (idempotency.Response, error) {
	return s.mutate(ctx, keys, claim, func(tx *gorm.DB) (idempotency.Response, error) {
		if err := s.store.deleteEndpoint(ctx, tx, merchantID, id); errors.Is(err, ErrNotFound) {
			return idempotency.Response{}, errEndpointNotFound
		} else if err != nil {
			return idempotency.Response{}, err
		}
		return answer(fiber.StatusOK, Deleted{ID: id, Object: "webhook_endpoint", Deleted: true})
	})
}

// RotateSecret gives the endpoint a new secret (shown once); the old one
// keeps signing beside it for 24 hours.
func (s *Service) RotateSecret(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, merchantID, id string) (idempotency.Response, error) {
	return s.mutate(ctx, keys, claim, func(tx *gorm.DB) (idempotency.Response, error) {
		ep, err := s.store.endpoint(ctx, tx, merchantID, id)
		if errors.Is(err, ErrNotFound) {
			return idempotency.Response{}, errEndpointNotFound
		}
		if err != nil {
			return idempotency.Response{}, err
		}
		now := s.now()
		until := now.Add(rotationOverlap)
		secret := NewSecret()
		sealed := s.cfg.Box.Seal(secretAAD(merchantID, id), []byte(secret))
		if err := s.store.rotateSecret(ctx, tx, merchantID, id, sealed, until, now); err != nil {
			return idempotency.Response{}, err
		}
		ep.Secret, ep.UpdatedAt = sealed, now
		v := ep.view()
		v.Secret = secret
		return secretAnswer(answer(fiber.StatusOK, v))
	})
}

// Redelivery is the answer of a redeliver: the event, and how many
// endpoints it was enqueued to.
type Redelivery struct {
	EventID string `json:"event_id" example:"evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	// Endpoints is how many endpoints take the event now; InFlight how
	// many of them got no new delivery, their delivery of it still waiting
	// or running (redeliver again once it has ended, if it failed).
	Endpoints int `json:"endpoints" example:"1"`
	InFlight  int `json:"in_flight" example:"0"`
} // @name EventRedelivery

// Redeliver enqueues an event again to every endpoint that takes it now.
func (s *Service) Redeliver(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, merchantID, id string) (idempotency.Response, error) {
	return s.mutate(ctx, keys, claim, func(tx *gorm.DB) (idempotency.Response, error) {
		ev, err := s.store.Get(ctx, merchantID, id)
		if errors.Is(err, ErrNotFound) {
			return idempotency.Response{}, problem.New(fiber.StatusNotFound, "event_not_found", "no such event")
		}
		if err != nil {
			return idempotency.Response{}, err
		}
		eps, err := s.store.endpoints(ctx, tx, merchantID)
		if err != nil {
			return idempotency.Response{}, err
		}
		var jobs []string
		for _, ep := range eps {
			if ep.DisabledAt == nil && ep.Wants(ev.Type) {
				jobs = append(jobs, ep.ID)
			}
		}
		inFlight, err := s.enqueue(ctx, tx, merchantID, ev.ID, jobs)
		if err != nil {
			return idempotency.Response{}, err
		}
		return answer(fiber.StatusAccepted, Redelivery{EventID: ev.ID, Endpoints: len(jobs), InFlight: inFlight})
	})
}

// enqueue queues the event's delivery to each endpoint and reports how
// many already had one waiting or running (insertJobs).
func (s *Service) enqueue(ctx context.Context, tx *gorm.DB, merchantID, eventID string, endpointIDs []string) (int, error) {
	if len(endpointIDs) == 0 {
		return 0, nil
	}
	jobs := make([]riverParams, 0, len(endpointIDs))
	for _, id := range endpointIDs {
		jobs = append(jobs, s.job(merchantID, eventID, id))
	}
	return s.insertJobs(ctx, tx, jobs)
}

// releaseWith releases the claim of a refused request and returns cause:
// an endpoint's change commits with its key's completion (mutate), so a
// key in progress never holds one, taken over or not.
func releaseWith(ctx context.Context, keys *idempotency.Store, claim idempotency.Claim, cause error) error {
	if err := keys.Release(ctx, claim); err != nil && !errors.Is(err, idempotency.ErrLostClaim) {
		return fmt.Errorf("events: release key: %w (while answering %v)", err, cause)
	}
	return cause
}
