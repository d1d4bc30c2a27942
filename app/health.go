package app

import (
	"context"
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

type health struct{ db *gorm.DB }

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
// @Description  The gateway can serve traffic: its database answers.
// @Tags         health
// @Produce      json
// @Produce      application/problem+json
// @Success      200 {object} HealthStatus
// @Failure      503 {object} problem.Problem "unavailable: the database does not answer"
// @ID           getReadiness
// @Router       /readyz [get]
func (h health) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := database.Ping(ctx, h.db); err != nil {
		return problem.New(fiber.StatusServiceUnavailable, "unavailable", "database unreachable")
	}
	return c.JSON(HealthStatus{Status: "ok"})
}
