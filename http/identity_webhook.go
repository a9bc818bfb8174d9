package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
	"phonefleet/internal/clock"
)

// The identity provider's webhook (spec 5.2): when a person leaves an
// organisation, the provider sends the membership-deleted event to
// POST /webhooks/identity, and the webhooks OAuth apps created on that
// person's behalf there are switched off. The request is signed as
// Standard Webhooks (https://www.standardwebhooks.com) prescribe, with the
// deployment's SERVICE_IDENTITY_WEBHOOK_SECRET; it carries no bearer token.
//
// The event read is the provider's organizationMembership.deleted (the
// shape Clerk sends through Svix, which signs by Standard Webhooks):
//
//	{"type": "organizationMembership.deleted",
//	 "data": {"organization": {"id": "<org_id claim>"},
//	          "public_user_data": {"user_id": "<sub claim>"}}}
//
// Every other event type is acknowledged (200) and ignored, so the provider
// does not retry what this service does not act on.

// identityMembershipDeleted is the event type acted on.
const identityMembershipDeleted = "organizationMembership.deleted"

// identityWebhookTolerance is how far webhook-timestamp may be from the
// server's clock, either way (the Standard Webhooks reference value): a
// replayed request older than that is refused.
const identityWebhookTolerance = 5 * time.Minute

// registerIdentityWebhookRoutes mounts POST /webhooks/identity on the root
// router: outside /v1 and behind no authentication, because its credential
// is the signature.
func (s *Server) registerIdentityWebhookRoutes(r *mux.Router) {
	r.Handle("/webhooks/identity", kernel.HandlerFunc(s.receiveIdentityWebhook)).Methods(http.MethodPost)
}

// identityEvent is the part of a provider event this service reads.
type identityEvent struct {
	Type string `json:"type"`
	Data struct {
		Organization struct {
			ID string `json:"id"`
		} `json:"organization"`
		PublicUserData struct {
			UserID string `json:"user_id"`
		} `json:"public_user_data"`
	} `json:"data"`
}

// identityWebhookAnswer is the 200 answer: what was received and how many
// webhooks it switched off.
type identityWebhookAnswer struct {
	Received         bool   `json:"received"`
	Type             string `json:"type"`
	WebhooksDisabled int    `json:"webhooksDisabled"`
}

func (s *Server) receiveIdentityWebhook(w http.ResponseWriter, r *http.Request) error {
	secret := s.deps.Identity.IdentityWebhookSecret
	if secret == "" {
		return domain.Errorf(domain.CodeNotFound, "nothing is served at this path")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if e, ok := kernel.AsPayloadTooLarge(err); ok {
			return e
		}
		return domain.Errorf(domain.CodeInvalidEvent, "the request body could not be read")
	}
	now := clock.Now()
	if c := s.deps.Identity.IdentityWebhookClock; c != nil {
		now = c()
	}
	msgID, err := verifyStandardWebhook(secret, r.Header, body, now)
	if err != nil {
		return domain.Errorf(domain.CodeInvalidSignature, "%v", err)
	}
	var ev identityEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type == "" {
		return domain.Errorf(domain.CodeInvalidEvent, "the body is not an event with a type")
	}
	answer := identityWebhookAnswer{Received: true, Type: ev.Type}
	if ev.Type != identityMembershipDeleted {
		return kernel.WriteJSON(w, http.StatusOK, answer)
	}
	orgID, userID := ev.Data.Organization.ID, ev.Data.PublicUserData.UserID
	if orgID == "" || userID == "" {
		return domain.Errorf(domain.CodeInvalidEvent, "%s needs data.organization.id and data.public_user_data.user_id", identityMembershipDeleted)
	}
	// The provider's message id is the cause of what this records.
	ctx := eventstore.CausedBy(eventstore.WithActor(r.Context(), "system", "identity-webhook"), msgID)
	n, err := s.app.Webhooks.DisableDepartedPersonWebhooks.Handle(ctx,
		webhooks.DisableDepartedPersonWebhooks{OrgID: orgID, UserID: userID})
	if err != nil {
		// Anything but a refusal is transient here: not_settled tells the
		// provider to deliver again, and switching off is idempotent.
		var de *domain.Error
		if !errors.As(err, &de) || de.Code == domain.CodeServiceUnavailable || errors.Is(err, context.DeadlineExceeded) {
			return domain.Errorf(domain.CodeNotSettled, "the event cannot be applied now; deliver it again").WithRetryable(true).Wrap(err)
		}
		return err
	}
	answer.WebhooksDisabled = n
	return kernel.WriteJSON(w, http.StatusOK, answer)
}

// verifyStandardWebhook checks a Standard Webhooks signature and returns the
// message id. secret is "whsec_" followed by the base64 of the key;
// webhook-signature lists space-separated "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" values, any of which may match (the provider sends
// several while it rotates its secret); webhook-timestamp (Unix seconds)
// must be within identityWebhookTolerance of now. It is written out here
// rather than taken from github.com/standard-webhooks/standard-webhooks'
// Go library (v0.0.1, its only release) because that library reads the
// wall clock itself, and this project injects clocks.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return "", errors.New("the identity webhook secret is not usable")
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", errors.New("webhook-id, webhook-timestamp and webhook-signature are required")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", errors.New("webhook-timestamp must be Unix seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > identityWebhookTolerance || d < -identityWebhookTolerance {
		return "", fmt.Errorf("webhook-timestamp is more than %v from the server's clock", identityWebhookTolerance)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if ok && version == "v1" && hmac.Equal([]byte(value), want) {
			return id, nil
		}
	}
	return "", errors.New("no webhook-signature matches")
}
