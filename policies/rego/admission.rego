# Which queues, flavors and backends a tenant's workload may use, and how large
# a gang it may ask for.
#
# Entry point: data.ignara.admission.decision -> {"allow": bool, "reasons": [string, ...]}
# Input and data schemas: see README.md in this directory.
#
# Note on negation: `not f(input.x)` is undefined (not true) when input.x is
# missing, so shape checks negate helper rules instead of builtin calls.
package ignara.admission

gpu := "nvidia.com/gpu"

# --- Facts about the input and the tenant --------------------------------------

tenant_name := t if {
	t := input.tenant
	is_string(t)
}

tenant := t if {
	t := data.ignara.tenants[tenant_name]
	is_object(t)
}

workload := w if {
	w := input.workload
	is_object(w)
}

limits := l if {
	l := tenant.limits
	is_object(l)
} else := {}

pod_sets := ps if {
	ps := workload.pod_sets
	is_array(ps)
	count(ps) > 0
}

queue := q if {
	q := workload.queue
	is_string(q)
}

backend := b if {
	b := workload.backend
	is_string(b)
}

runtime := r if {
	r := workload.max_runtime_seconds
	is_number(r)
}

# What the tenant may use: data.ignara.tenants[t].queues / .flavors / .backends.
allowed(field) := {x | some x in tenant[field]}

listed(xs) := concat(", ", sort(xs)) if count(xs) > 0

else := "none"

# Flavors the workload names, on the workload and on any pod set.
requested_flavors contains f if some f in workload.flavors

requested_flavors contains f if {
	some ps in pod_sets
	some f in ps.flavors
}

# A whole, non-negative number.
whole(n) if {
	is_number(n)
	n >= 0
	n == round(n)
}

pod_set_is_object(ps) if is_object(ps)

pod_count(ps) := ps.count if whole(ps.count)

# The per-pod GPU request of a pod set as it was written (0 when absent).
gpu_value(ps) := object.get(ps, ["requests", gpu], 0) if is_object(ps)

# ... and as a whole number; undefined when malformed.
gpus_per_pod(ps) := v if {
	v := gpu_value(ps)
	whole(v)
}

gpus_per_pod(ps) := to_number(v) if {
	v := gpu_value(ps)
	is_string(v)
	regex.match(`^[0-9]+$`, v)
}

label(i, ps) := sprintf("pod set \"%s\"", [ps.name]) if is_string(ps.name)

else := sprintf("pod set %d", [i])

total_pods := sum([pod_count(ps) | some ps in pod_sets])

total_gpus := sum([(pod_count(ps) * gpus_per_pod(ps)) | some ps in pod_sets])

# --- Who asks ----------------------------------------------------------------------

deny contains "input.tenant is missing or not a string" if not tenant_name

deny contains sprintf("tenant \"%s\" is not known to the gateway", [tenant_name]) if {
	tenant_name
	not tenant
}

deny contains sprintf("tenant \"%s\" is suspended", [tenant_name]) if tenant.suspended == true

deny contains "input.workload is missing or not an object" if not workload

# --- Where it runs -------------------------------------------------------------------

deny contains "workload.queue is missing or not a string" if {
	workload
	not queue
}

deny contains msg if {
	tenant
	not queue in allowed("queues")
	msg := sprintf(
		"queue \"%s\" is not open to tenant \"%s\" (allowed: %s)",
		[queue, tenant_name, listed(allowed("queues"))],
	)
}

deny contains "workload.backend is missing or not a string" if {
	workload
	not backend
}

deny contains msg if {
	tenant
	not backend in allowed("backends")
	msg := sprintf(
		"backend \"%s\" is not open to tenant \"%s\" (allowed: %s)",
		[backend, tenant_name, listed(allowed("backends"))],
	)
}

deny contains msg if {
	tenant
	some f in requested_flavors
	not f in allowed("flavors")
	msg := sprintf(
		"flavor \"%v\" is not open to tenant \"%s\" (allowed: %s)",
		[f, tenant_name, listed(allowed("flavors"))],
	)
}

# --- How big it is -------------------------------------------------------------------

deny contains "workload.pod_sets must be a non-empty array" if {
	workload
	not pod_sets
}

deny contains sprintf("pod set %d must be an object", [i]) if {
	some i, ps in pod_sets
	not pod_set_is_object(ps)
}

deny contains sprintf("%s: count must be a whole number of pods, not %s", [label(i, ps), json.marshal(c)]) if {
	some i, ps in pod_sets
	pod_set_is_object(ps)
	c := object.get(ps, "count", null)
	not whole(c)
}

deny contains sprintf("%s: %s must be a whole number of GPUs per pod, not %s", [label(i, ps), gpu, json.marshal(v)]) if {
	some i, ps in pod_sets
	v := gpu_value(ps)
	not gpus_per_pod(ps)
}

deny contains msg if {
	limit := limits.max_pods_per_workload
	total_pods > limit
	msg := sprintf(
		"gang of %v pods is over tenant \"%s\"'s limit of %v pods per workload",
		[total_pods, tenant_name, limit],
	)
}

deny contains msg if {
	limit := limits.max_gpus_per_workload
	total_gpus > limit
	msg := sprintf(
		"workload asks for %v GPUs (%s: pod count x per-pod request, summed over pod sets), over tenant \"%s\"'s limit of %v per workload",
		[total_gpus, gpu, tenant_name, limit],
	)
}

deny contains msg if {
	limit := limits.max_runtime_seconds
	runtime > limit
	msg := sprintf(
		"max_runtime_seconds %v is over tenant \"%s\"'s limit of %v seconds",
		[runtime, tenant_name, limit],
	)
}

deny contains msg if {
	limit := limits.max_runtime_seconds
	workload
	not runtime
	msg := sprintf(
		"workload.max_runtime_seconds must be a number: tenant \"%s\" caps runtime at %v seconds",
		[tenant_name, limit],
	)
}

# --- The decision ----------------------------------------------------------------------

# Belt and braces: besides having no reason to refuse, an admitted workload must
# positively name an open queue and backend and carry at least one pod set.
admissible if {
	queue in allowed("queues")
	backend in allowed("backends")
	pod_sets
}

default allow := false

allow if {
	admissible
	count(deny) == 0
}

decision := {"allow": true, "reasons": []} if allow

else := {"allow": false, "reasons": sort(deny)} if count(deny) > 0

else := {"allow": false, "reasons": ["no rule admits this workload"]}
