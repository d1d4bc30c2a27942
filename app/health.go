package app

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/problem"
)

// HealthStatus is the body of the health endpoints.
type HealthStatus struct {
	Status string `json:"status" example:"ok"`
} // @name HealthStatus

// Readiness is the body of /readyz: what the gateway depends on, each
// "ok" or what is wrong with it.
type Readiness struct {
	// Status is ok, or degraded while an optional dependency (Redis) does
	// not answer: the gateway still serves, so a load balancer keeps it.
	Status string `json:"status" example:"ok" enums:"ok,degraded"`
	// Database is the database's state; without it the answer is a 503.
	Database string `json:"database" example:"ok" enums:"ok"`
	// Redis is the rate limiter's Redis (only when REDIS_URL is set):
	// unreachable means limits are kept in this instance's memory until it
	// answers.
	Redis string `json:"redis,omitempty" example:"ok" enums:"ok,unreachable"`
} // @name Readiness

type health struct {
	db *gorm.DB
	// redis is the limits' Redis, nil without REDIS_URL.
	redis interface{ Ping(context.Context) error }
	// draining is set from SIGTERM on: the instance still serves (for
	// SHUTDOWN_DELAY) but asks to be taken out of the load balancer.
	draining *atomic.Bool
}

// healthz godoc
// @Summary      Liveness
// @Description  The process is up. It does not touch the database.
// @Tags         health
// @Produce      json
// @Success      200 {object} HealthStatus
// @ID           getLiveness
// @Router       /healthz [get]
func (h health) healthz(c *fiber.Ctx) error {
	return c.JSON(HealthStatus{Status: "ok"})
}

// readyz godoc
// @Summary      Readiness
// @Description  The gateway can serve traffic: its database answers. With REDIS_URL it also reports the rate
// @Description  limiter's Redis; while Redis does not answer the gateway still serves (limits fall back to this
// @Description  instance's memory), so the answer is 200 with status "degraded", not a 503.
// @Tags         health
// @Produce      json
// @Produce      application/problem+json
// @Success      200 {object} Readiness
// @Failure      503 {object} problem.Problem "unavailable: the database does not answer; draining: the instance is shutting down (it still serves for SHUTDOWN_DELAY)"
// @ID           getReadiness
// @Router       /readyz [get]
func (h health) readyz(c *fiber.Ctx) error {
	if h.draining != nil && h.draining.Load() {
		return problem.New(fiber.StatusServiceUnavailable, "draining", "shutting down: still serving for SHUTDOWN_DELAY, take it out")
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := database.Ping(ctx, h.db); err != nil {
		return problem.New(fiber.StatusServiceUnavailable, "unavailable", "database unreachable")
	}
	r := Readiness{Status: "ok", Database: "ok"}
	if h.redis != nil {
		r.Redis = "ok"
		if err := h.redis.Ping(ctx); err != nil {
			r.Status, r.Redis = "degraded", "unreachable"
		}
	}
	return c.JSON(r)
}
