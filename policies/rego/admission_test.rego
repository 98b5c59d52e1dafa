# Unit tests for data.ignara.admission. Fixtures: fixtures_test.rego.
#
# Portable style (see README.md): override input key by key, bind fixtures to
# locals before `with`, and derive variants with builtins (object.union,
# json.patch), never with user functions.
package ignara.admission_test

import data.ignara.admission
import data.ignara.fixtures_test as fx

test_fitting_workload_is_admitted if {
	tenants := fx.tenants
	w := fx.workload
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_gang_exactly_at_the_limits_is_admitted if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [{"name": "workers", "count": 16, "requests": {"nvidia.com/gpu": 2}}]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_another_tenants_queue_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"queue": "globex-main"})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["queue \"globex-main\" is not open to tenant \"acme\" (allowed: acme-batch, acme-main)"]
}

test_pod_set_flavor_not_open_to_tenant_is_refused if {
	tenants := fx.tenants
	w := fx.workload
	d := admission.decision with input.tenant as "globex"
		with input.workload as object.union(w, {"queue": "globex-main", "backend": "ray"})
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["flavor \"h100\" is not open to tenant \"globex\" (allowed: a100)"]
}

test_workload_flavor_preference_is_checked_too if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"flavors": ["a100", "mi300x"]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["flavor \"mi300x\" is not open to tenant \"acme\" (allowed: a100, h100)"]
}

test_backend_not_open_to_tenant_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"backend": "ray"})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["backend \"ray\" is not open to tenant \"acme\" (allowed: local, slurm)"]
}

test_backend_is_required if {
	tenants := fx.tenants
	w := json.patch(fx.workload, [{"op": "remove", "path": "/backend"}])
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["workload.backend is missing or not a string"]
}

test_gang_over_the_pod_limit_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [
		{"name": "workers", "count": 15, "requests": {"cpu": "1"}},
		{"name": "ps", "count": 2, "requests": {"cpu": "1"}},
	]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["gang of 17 pods is over tenant \"acme\"'s limit of 16 pods per workload"]
}

test_gpus_are_summed_over_pod_sets if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [
		{"name": "workers", "count": 4, "requests": {"nvidia.com/gpu": 8}},
		{"name": "evaluator", "count": 1, "requests": {"nvidia.com/gpu": 1}},
	]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == [concat("", [
		"workload asks for 33 GPUs (nvidia.com/gpu: pod count x per-pod request, summed over pod sets), ",
		"over tenant \"acme\"'s limit of 32 per workload",
	])]
}

test_gpu_quantity_may_be_a_numeric_string if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [{"name": "workers", "count": 4, "requests": {"nvidia.com/gpu": "8"}}]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_malformed_gpu_quantity_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [{"name": "workers", "count": 1, "requests": {"nvidia.com/gpu": "1.5"}}]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["pod set \"workers\": nvidia.com/gpu must be a whole number of GPUs per pod, not \"1.5\""]
}

test_bad_pod_counts_are_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": [{"count": -1}, {"name": "b", "count": 2.5}, "c"]})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == [
		"pod set \"b\": count must be a whole number of pods, not 2.5",
		"pod set 0: count must be a whole number of pods, not -1",
		"pod set 2 must be an object",
	]
}

test_empty_gang_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"pod_sets": []})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["workload.pod_sets must be a non-empty array"]
}

test_runtime_over_the_limit_is_refused if {
	tenants := fx.tenants
	w := object.union(fx.workload, {"max_runtime_seconds": 90000})
	d := admission.decision with input.tenant as "acme"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["max_runtime_seconds 90000 is over tenant \"acme\"'s limit of 86400 seconds"]
}

test_tenant_without_limits_is_unlimited if {
	tenants := fx.tenants
	w := {
		"queue": "globex-main",
		"backend": "ray",
		"pod_sets": [{"name": "huge", "count": 512, "requests": {"nvidia.com/gpu": 8}, "flavors": ["a100"]}],
	}
	d := admission.decision with input.tenant as "globex"
		with input.workload as w
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_unknown_tenant_is_refused if {
	tenants := fx.tenants
	w := fx.workload
	d := admission.decision with input.tenant as "umbrella"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["tenant \"umbrella\" is not known to the gateway"]
}

test_suspended_tenant_is_refused if {
	tenants := fx.tenants
	w := {"queue": "initech-main", "backend": "local", "pod_sets": [{"name": "a", "count": 1}]}
	d := admission.decision with input.tenant as "initech"
		with input.workload as w
		with data.ignara.tenants as tenants
	d.reasons == ["tenant \"initech\" is suspended"]
}

test_missing_input_is_refused_with_reasons if {
	tenants := fx.tenants
	d := admission.decision with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["input.tenant is missing or not a string", "input.workload is missing or not an object"]
}
