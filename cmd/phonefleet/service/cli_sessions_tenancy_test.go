package service

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
)

// CLI sign-in routes: a CLI starts a session (no credential is read), and
// organisation A's admin denies it, which makes it A's. Organisation B then
// calls every route with its id and code: the lookup, approve and deny
// must answer exactly as for a session that never existed (so B cannot
// approve it either), and B's poll, without the poll token, as well.
func init() {
	session := func(c *tenancyClient) (map[string]string, map[string]string) {
		priv, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			c.t.Fatal(err)
		}
		start := `{"publicKey":"` + base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()) + `","host":"tenancy"}`
		status, _, body := c.do("POST", "/v1/cli-sessions", start)
		if status != http.StatusCreated {
			c.t.Fatalf("start a CLI sign-in: got %d %s", status, body)
		}
		var out struct {
			ID   string `json:"sessionId"`
			Code string `json:"userCode"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.ID == "" || out.Code == "" {
			c.t.Fatalf("start a CLI sign-in: no sessionId or userCode in %s", body)
		}
		decide := `{"userCode":"` + out.Code + `"}`
		if status, _, body := c.do("POST", "/v1/cli-sessions/"+out.ID+"/deny", decide); status != http.StatusOK {
			c.t.Fatalf("deny the CLI sign-in as organisation A: got %d %s", status, body)
		}
		return map[string]string{"sessionId": out.ID, "userCode": out.Code}, map[string]string{"POST": decide}
	}
	for _, p := range []string{"/v1/cli-sessions/{sessionId}", "/v1/cli-sessions/by-code/{userCode}",
		"/v1/cli-sessions/{sessionId}/approve", "/v1/cli-sessions/{sessionId}/deny"} {
		tenancyFixtures[p] = session
	}
}
