package main

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func podWithPreStop(cmd ...string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:      "web",
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}},
		Env: []corev1.EnvVar{
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "MODE", Value: "drain"},
			{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
		},
	}}}}
}

// A plain sleep is emulated without a process; anything else runs as the kubelet would.
func TestPreStopExecRunsOnlyRealCommands(t *testing.T) {
	for _, sleep := range [][]string{{"sleep", "15"}, {"/bin/sh", "-c", "sleep 5"}} {
		if got := preStopExec(podWithPreStop(sleep...)); got != nil {
			t.Errorf("%v: got %v, want the sleep emulated", sleep, got)
		}
	}
	hook := []string{"/usr/local/bin/ghostip", "drain-wait", "--max-wait", "40s"}
	if got := preStopExec(podWithPreStop(hook...)); !reflect.DeepEqual(got, hook) {
		t.Errorf("got %v, want %v", got, hook)
	}
	if got := preStopExec(nil); got != nil {
		t.Errorf("force-deleted pod: got %v", got)
	}
}

// The hook's environment resolves the downward API fields a lab pod has and
// leaves out what the lab cannot provide (Secrets).
func TestHookEnvResolvesDownwardAPI(t *testing.T) {
	c := &controller{cfg: config{stateDir: "/var/lib/ghostip-lab"}}
	rt := &podRT{ip: "10.244.1.7", name: "web-abc", ns: "demo", uid: "u1", node: "node-1"}
	env := c.hookEnv(rt, podWithPreStop("x"))
	want := map[string]bool{"POD_IP=10.244.1.7": true, "MODE=drain": true, "KUBECONFIG=/var/lib/ghostip-lab/admin.kubeconfig": true}
	for _, e := range env {
		delete(want, e)
		if len(e) >= 7 && e[:7] == "SECRET=" {
			t.Errorf("secret env passed: %s", e)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing %v in %v", want, env)
	}
}
