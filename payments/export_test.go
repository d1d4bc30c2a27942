package payments

import "time"

// SetWebhookClock replaces the clock of the webhook lookups' limit, for
// tests that make time pass.
func (s *Service) SetWebhookClock(now func() time.Time) { s.hookLookups.SetClock(now) }
