package service

import (
	"encoding/json"
	"net/http"
)

// Gateway routes: organisation A's admin creates an enrollment code and a
// gateway enrolls with it; organisation B's admin revokes A's gateway by
// id. B must be answered as for a gateway that never existed (and so
// revoke nothing).
func init() {
	tenancyFixtures["/v1/gateways/{gatewayId}"] = func(c *tenancyClient) (map[string]string, map[string]string) {
		status, _, body := c.do("POST", "/v1/gateways/enrollment-codes", `{"name":"tenancy"}`)
		if status != http.StatusCreated {
			c.t.Fatalf("create an enrollment code for organisation A: got %d %s", status, body)
		}
		var code struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(body, &code); err != nil || code.Code == "" {
			c.t.Fatalf("create an enrollment code for organisation A: no code in %s", body)
		}
		status, _, body = c.do("POST", "/gateway/v1/enroll", `{"code":"`+code.Code+`"}`)
		if status != http.StatusCreated {
			c.t.Fatalf("enroll a gateway for organisation A: got %d %s", status, body)
		}
		var gw struct {
			ID string `json:"gatewayId"`
		}
		if err := json.Unmarshal(body, &gw); err != nil || gw.ID == "" {
			c.t.Fatalf("enroll a gateway for organisation A: no gatewayId in %s", body)
		}
		return map[string]string{"gatewayId": gw.ID}, nil
	}
}
