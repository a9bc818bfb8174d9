package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"phonefleet/internal/gateway"
)

func TestGatewaySettings(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		want  gateway.AgentConfig
		level string
		err   string
	}{
		{
			name:  "defaults",
			env:   map[string]string{"GATEWAY_URL": "https://cp.example.test"},
			want:  gateway.AgentConfig{URLs: []string{"https://cp.example.test"}, DataDir: "./.phonefleet-gateway", SimDevices: 1, Channel: "stable"},
			level: "info",
		},
		{
			name: "everything set",
			env: map[string]string{"GATEWAY_URL": "http://a:8080, http://b:8080,", "GATEWAY_DATA_DIR": "/var/lib/pfg",
				"GATEWAY_ENROLL_CODE": "pfe_x_y", "GATEWAY_NAME": "site a", "GATEWAY_SIM_DEVICES": "0",
				"GATEWAY_ADB_ADDR": "127.0.0.1:5037", "GATEWAY_CHANNEL": "beta", "GATEWAY_SIM_LATENCY": "2s",
				"GATEWAY_PING_INTERVAL": "1s", "GATEWAY_PING_MISSES": "4", "SERVICE_LOG_LEVEL": "debug"},
			want: gateway.AgentConfig{URLs: []string{"http://a:8080", "http://b:8080"}, DataDir: "/var/lib/pfg", EnrollCode: "pfe_x_y",
				Name: "site a", SimDevices: 0, ADBAddr: "127.0.0.1:5037", Channel: "beta", SimLatency: 2 * time.Second,
				PingInterval: time.Second, MissedPings: 4},
			level: "debug",
		},
		{name: "no URL", env: map[string]string{}, err: "GATEWAY_URL is required"},
		{name: "a URL without scheme", env: map[string]string{"GATEWAY_URL": "cp.example.test"}, err: "invalid GATEWAY_URL"},
		{name: "a websocket URL", env: map[string]string{"GATEWAY_URL": "ws://cp.example.test"}, err: "invalid GATEWAY_URL"},
		{name: "negative sims", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_SIM_DEVICES": "-1"}, err: "invalid GATEWAY_SIM_DEVICES"},
		{name: "sims not a number", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_SIM_DEVICES": "two"}, err: "invalid GATEWAY_SIM_DEVICES"},
		{name: "adb address without port", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_ADB_ADDR": "localhost"}, err: "invalid GATEWAY_ADB_ADDR"},
		{name: "bad channel", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_CHANNEL": "Beta!"}, err: "invalid GATEWAY_CHANNEL"},
		{name: "bad latency", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_SIM_LATENCY": "2"}, err: "invalid GATEWAY_SIM_LATENCY"},
		{name: "negative latency", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_SIM_LATENCY": "-1s"}, err: "invalid GATEWAY_SIM_LATENCY"},
		{name: "ping interval too short", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_PING_INTERVAL": "10ms"}, err: "invalid GATEWAY_PING_INTERVAL"},
		{name: "no ping misses", env: map[string]string{"GATEWAY_URL": "http://a", "GATEWAY_PING_MISSES": "0"}, err: "invalid GATEWAY_PING_MISSES"},
		{name: "bad log level", env: map[string]string{"GATEWAY_URL": "http://a", "SERVICE_LOG_LEVEL": "loud"}, err: "invalid SERVICE_LOG_LEVEL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, level, err := gatewaySettings(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v; want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || level != tc.level {
				t.Errorf("got %+v, level %q; want %+v, level %q", got, level, tc.want, tc.level)
			}
		})
	}
}

func TestGatewayTakesNoArguments(t *testing.T) {
	// The code is never taken from the command line, where ps shows it.
	err := run(context.Background(), []string{"gateway", "-enroll-code", "pfe_x_y"}, nil)
	var u usageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "GATEWAY_ENROLL_CODE") {
		t.Fatalf("got %v; want the usage, which names GATEWAY_ENROLL_CODE", err)
	}
}
