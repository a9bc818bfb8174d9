package service

import (
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// Copilot threads: the tenancy deployment has no model, so organisation
// A's thread is recorded as its stream (a finished turn), which the read
// routes then serve; B asks for it on every thread route. (The routes'
// answers to another organisation and to another person of the same
// organisation, with a model, are TestCopilotIsForPeople's.)
func init() {
	thread := func(c *tenancyClient) (map[string]string, map[string]string) {
		id, turn := domain.NewID(domain.PrefixCopilotThread), domain.NewID(domain.PrefixCopilotTurn)
		now := time.Now().UTC()
		news, err := eventstore.Encode[domain.Event](domain.Events, c.org,
			domain.CopilotThreadStarted{ThreadID: id, OrgID: c.org, UserID: "user_a", DeviceID: domain.NewID(domain.PrefixDevice), Title: "tenancy", At: now},
			domain.CopilotMessagePosted{ThreadID: id, TurnID: turn, Text: "tenancy", By: domain.Actor{Kind: domain.ActorUser, ID: "user_a"}, At: now},
			domain.CopilotTurnEnded{ThreadID: id, TurnID: turn, Outcome: domain.CopilotTurnCompleted, At: now})
		if err != nil {
			c.t.Fatal(err)
		}
		if _, err := c.app.store.Append(testutil.Context(c.t), domain.CopilotThreadStream(id), eventstore.NoStream, news...); err != nil {
			c.t.Fatalf("record a copilot thread for organisation A: %v", err)
		}
		return map[string]string{"threadId": id}, nil
	}
	for _, p := range []string{"/v1/copilot/threads/{threadId}", "/v1/copilot/threads/{threadId}/stream", "/v1/copilot/threads/{threadId}/stop"} {
		tenancyFixtures[p] = thread
	}
}
