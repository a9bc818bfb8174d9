package wire

import (
	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/internal/releases"
	"phonefleet/projections"
)

// The shapes of gateways (/v1/gateways and the gateway surface
// /gateway/v1, issue 14). Times are written by domain.FormatWebhookTime.

// GatewayEnrollmentCode is a new enrollment code; code is shown only here.
type GatewayEnrollmentCode struct {
	CodeID    string `json:"codeId"`
	Code      string `json:"code"`
	ExpiresAt string `json:"expiresAt"`
}

// NewGatewayEnrollmentCode shapes a created code.
func NewGatewayEnrollmentCode(c gateways.CreatedGatewayEnrollmentCode) GatewayEnrollmentCode {
	return GatewayEnrollmentCode{CodeID: c.CodeID, Code: c.Code, ExpiresAt: domain.FormatWebhookTime(c.ExpiresAt)}
}

// Gateway is an enrolled gateway and its tunnel.
type Gateway struct {
	GatewayID   string        `json:"gatewayId"`
	Name        string        `json:"name"`
	State       string        `json:"state"`
	Version     *string       `json:"version"`
	EnrolledAt  string        `json:"enrolledAt"`
	RevokedAt   *string       `json:"revokedAt"`
	RevokedBy   *domain.Actor `json:"revokedBy"`
	Connected   bool          `json:"connected"`
	Instance    *string       `json:"instance"`
	ConnectedAt *string       `json:"connectedAt"`
	LastSeenAt  *string       `json:"lastSeenAt"`
}

// GatewayList is GET /v1/gateways's answer.
type GatewayList struct {
	Gateways []Gateway `json:"gateways"`
}

// NewGatewayList shapes the organisation's gateways.
func NewGatewayList(vs []projections.GatewayView) GatewayList {
	out := GatewayList{Gateways: make([]Gateway, 0, len(vs))}
	for _, v := range vs {
		g := Gateway{GatewayID: v.GatewayID, Name: v.Name, State: v.State, EnrolledAt: domain.FormatWebhookTime(v.EnrolledAt),
			RevokedBy: v.RevokedBy, Connected: v.Connected, Instance: v.Instance, RevokedAt: optionalTime(v.RevokedAt),
			ConnectedAt: optionalTime(v.ConnectedAt), LastSeenAt: optionalTime(v.LastSeenAt)}
		if v.Version != "" {
			version := v.Version
			g.Version = &version
		}
		out.Gateways = append(out.Gateways, g)
	}
	return out
}

// EnrolledGateway is POST /gateway/v1/enroll's answer; credential is
// shown only here.
type EnrolledGateway struct {
	GatewayID  string `json:"gatewayId"`
	OrgID      string `json:"orgId"`
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// NewEnrolledGateway shapes a new gateway.
func NewEnrolledGateway(g gateways.EnrolledGateway) EnrolledGateway {
	return EnrolledGateway{GatewayID: g.GatewayID, OrgID: g.OrgID, Name: g.Name, Credential: g.Credential}
}

// Release is a release of phonefleet.
type Release struct {
	Version     string `json:"version"`
	Channel     string `json:"channel"`
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	PublishedAt string `json:"publishedAt"`
}

// NewRelease shapes a release.
func NewRelease(r releases.Release) Release {
	return Release{Version: r.Version, Channel: r.Channel, URL: r.URL, SHA256: r.SHA256, PublishedAt: domain.FormatWebhookTime(r.PublishedAt)}
}
