"""Runs Placement's own functional tests (gabbi YAML files) against @rigging/reshape/http.

Usage: /usr/bin/python3 test/gabbi/run.py [--target ours|placement] <placement git dir> [file ...]
       (from packages/reshape)

The YAML files are read from a clone of openstack/placement (placement/tests/functional/gabbits)
and copied to a temporary directory; they are not part of this repository. For each file a fresh
server (bench/serve.ts, memory store, tokens checked as Placement's noauth2 middleware checks
them) is started with os-traits' standard traits (Debian's
python3-os-traits, as Placement syncs them into its database), the state of the file's fixtures
(Placement's placement/tests/functional/fixtures/gabbits.py: AllocationFixture,
SharedStorageFixture, NUMAAggregateFixture, NUMANetworkFixture, DeepNUMANetworkFixture,
NonSharedStorageFixture, GranularFixture, NeutronQoSMultiSegmentFixture) is created over HTTP,
write by write as the fixture makes it, the fixture's $ENVIRON values are set, and gabbi-run
(python3-gabbi) runs the file.
With `--target placement` the same files run, on the same harness, against OpenStack Placement
itself (Debian's python3-placement, bench/placement_server.py: a fresh SQLite database per file,
noauth2), so that both counts are measured alike.
Prints one line per file (tests, passed, failed), then one a test (passed or FAIL, its method,
URL and name) and, under each failure, why (gabbi's first line) and the error code we answered;
scripts/gabbi-parity.py reads that output.
"""
import json
import os
import socket
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
import uuid

import os_traits
import yaml

# The files of the endpoints we implement, with their fixtures built over HTTP below (the RBAC and
# policy files test policies we do not have, cors.yaml a CORS middleware).
FILES = [
    'aggregate', 'allocation-bad-class', 'allocation-candidates',
    'allocation-candidates-any-traits', 'allocation-candidates-any-traits-groups',
    'allocation-candidates-bug-1792503', 'allocation-candidates-mappings-numa',
    'allocation-candidates-mappings-sharing', 'allocation-candidates-member-of',
    'allocation-candidates-root-required', 'allocations', 'allocations-1-8', 'allocations-1-12',
    'allocations-1.28', 'allocations-bug-1714072', 'allocations-bug-1778591',
    'allocations-bug-1778743', 'allocations-bug-1779717', 'allocations-mappings',
    'allocations-post', 'basic-http', 'bug-1674694', 'confirm-auth', 'consumer-types-1.38',
    'consumer-types-bug-story-2009167', 'ensure-consumer', 'granular', 'granular-same-subtree',
    'inventory', 'microversion', 'microversion-bug-1724065', 'non-cors', 'reshaper',
    'resource-class-in-use', 'resource-classes', 'resource-classes-1-6', 'resource-classes-1-7',
    'resource-classes-last-modified', 'resource-provider', 'resource-provider-aggregates',
    'resource-provider-any-traits', 'resource-provider-bug-1779818',
    'resource-provider-duplication', 'resource-provider-links',
    'resource-provider-resources-query', 'same-subtree-deep', 'shared-resources', 'traits',
    'unicode', 'usage', 'with-allocations',
]


def api_fixture_environ():
    """The values Placement's APIFixture puts in the environment."""
    env = {k: str(uuid.uuid4()) for k in [
        'RP_UUID', 'RP_NAME', 'RP_UUID1', 'RP_NAME1', 'RP_UUID2', 'RP_NAME2', 'PROJECT_ID',
        'ADMIN_PROJECT_ID', 'SERVICE_PROJECT_ID', 'USER_ID', 'PROJECT_ID_ALT', 'USER_ID_ALT',
        'INSTANCE_UUID', 'MIGRATION_UUID', 'CONSUMER_UUID', 'PARENT_PROVIDER_UUID',
        'ALT_PARENT_PROVIDER_UUID']}
    env.update(CUSTOM_RES_CLASS='CUSTOM_IRON_NFV', CUSTOM_RES_CLASS1='CUSTOM_IRON_NFV1',
               CUSTOM_RES_CLASS2='CUSTOM_IRON_NFV2')
    return env


def call(base, method, path, body=None, version='1.28'):
    req = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={'x-auth-token': 'admin', 'openstack-api-version': f'placement {version}',
                 'content-type': 'application/json'})
    with urllib.request.urlopen(req) as res:
        text = res.read()
        return json.loads(text) if text else None


class Builder:
    """Placement's fixture helpers (placement/tests/functional/db/test_base.py) over HTTP: each
    call one write, in the fixture's order, so that provider generations end as the fixture's."""

    def __init__(self, base):
        self.base = base
        self.classes = set()
        self.trait_names = set()

    def provider(self, name, *aggs, parent=None):
        """create_provider: a provider (a fresh uuid, as uuidsentinel's), then its aggregates."""
        rp = str(uuid.uuid4())
        body = {'name': name, 'uuid': rp}
        if parent:
            body['parent_provider_uuid'] = parent
        call(self.base, 'POST', '/resource_providers', body)
        if aggs:
            self.aggregates(rp, aggs)
        return rp

    def generation(self, rp):
        return call(self.base, 'GET', f'/resource_providers/{rp}')['generation']

    def aggregates(self, rp, aggs):
        """ResourceProvider.set_aggregates: the generation is left as it is (the list form of
        microversions before 1.19 does the same)."""
        call(self.base, 'PUT', f'/resource_providers/{rp}/aggregates', list(aggs), version='1.18')

    def resource_class(self, rc):
        if rc.startswith('CUSTOM_') and rc not in self.classes:
            call(self.base, 'PUT', f'/resource_classes/{rc}')
            self.classes.add(rc)

    def inventory(self, rp, rc, total, **kwargs):
        """add_inventory: max_unit defaults to the total."""
        self.resource_class(rc)
        kwargs.setdefault('max_unit', total)
        call(self.base, 'POST', f'/resource_providers/{rp}/inventories', {
            'resource_provider_generation': self.generation(rp), 'resource_class': rc,
            'total': total, **kwargs})

    def traits(self, rp, *names):
        """set_traits: custom traits created first; the provider's traits replaced."""
        for name in names:
            if name.startswith('CUSTOM_') and name not in self.trait_names:
                call(self.base, 'PUT', f'/traits/{name}')
                self.trait_names.add(name)
        call(self.base, 'PUT', f'/resource_providers/{rp}/traits', {
            'traits': list(names), 'resource_provider_generation': self.generation(rp)})

    def allocate(self, rp, consumer, user, project, resources):
        """ensure_consumer + set_allocation for a new consumer."""
        call(self.base, 'PUT', f'/allocations/{consumer}', {
            'allocations': {rp: {'resources': resources}}, 'project_id': project,
            'user_id': user, 'consumer_generation': None})


def allocation_fixture(base, env):
    """Placement's AllocationFixture: one provider, three consumers of two users."""
    env.update(ALT_USER_ID=str(uuid.uuid4()), CONSUMER_0=str(uuid.uuid4()),
               CONSUMER_ID=str(uuid.uuid4()), ALT_CONSUMER_ID=str(uuid.uuid4()),
               ALT_RP_UUID=str(uuid.uuid4()), ALT_RP_NAME=str(uuid.uuid4()))
    rp = env['RP_UUID']
    call(base, 'POST', '/resource_providers', {'name': env['RP_NAME'], 'uuid': rp})
    # Two inventory writes, as the fixture's two add_inventory calls: generation 2 after them.
    call(base, 'POST', f'/resource_providers/{rp}/inventories', {
        'resource_provider_generation': 0, 'resource_class': 'DISK_GB', 'total': 2048,
        'step_size': 10, 'min_unit': 10, 'max_unit': 1000})
    call(base, 'POST', f'/resource_providers/{rp}/inventories', {
        'resource_provider_generation': 1, 'resource_class': 'VCPU', 'total': 10,
        'max_unit': 10})
    for consumer, user, resources in [
            ('CONSUMER_0', 'USER_ID', {'DISK_GB': 1000}),
            ('CONSUMER_ID', 'USER_ID', {'VCPU': 6}),
            ('ALT_CONSUMER_ID', 'ALT_USER_ID', {'DISK_GB': 20, 'VCPU': 1})]:
        call(base, 'PUT', f'/allocations/{env[consumer]}', {
            'allocations': {rp: {'resources': resources}}, 'project_id': env['PROJECT_ID'],
            'user_id': env[user], 'consumer_generation': None})


def shared_storage_fixture(base, env):
    """Placement's SharedStorageFixture: two compute nodes (NUMA nodes and PFs below them) and two
    sharing storage providers in one aggregate."""
    b = Builder(base)
    agg = env['AGG_UUID'] = str(uuid.uuid4())
    rps = {name: b.provider(name, agg) for name in ('cn1', 'cn2', 'ss', 'ss2')}
    for numa, cn in [('numa1_1', 'cn1'), ('numa1_2', 'cn1'), ('numa2_1', 'cn2'),
                     ('numa2_2', 'cn2')]:
        rps[numa] = b.provider(numa, parent=rps[cn])
    for pf, numa in [('pf1_1', 'numa1_1'), ('pf1_2', 'numa1_2'), ('pf2_1', 'numa2_1'),
                     ('pf2_2', 'numa2_2')]:
        rps[pf] = b.provider(pf, parent=rps[numa])
    for name, rp in rps.items():
        env[f'{name.upper()}_UUID'] = rp
    for cn in ('cn1', 'cn2'):
        b.inventory(rps[cn], 'VCPU', 24, allocation_ratio=16.0)
        b.inventory(rps[cn], 'MEMORY_MB', 128 * 1024, allocation_ratio=1.5)
    b.traits(rps['cn1'], 'HW_CPU_X86_SSE', 'HW_CPU_X86_SSE2')
    b.inventory(rps['cn2'], 'DISK_GB', 2000, reserved=100, allocation_ratio=1.0)
    for ss in ('ss', 'ss2'):
        b.inventory(rps[ss], 'DISK_GB', 2000, reserved=100, allocation_ratio=1.0)
        b.traits(rps[ss], 'MISC_SHARES_VIA_AGGREGATE')
    for pf in ('pf1_1', 'pf1_2', 'pf2_1', 'pf2_2'):
        b.inventory(rps[pf], 'SRIOV_NET_VF', 8, allocation_ratio=1.0)


def numa_aggregate_fixture(base, env):
    """Placement's NUMAAggregateFixture: compute nodes without resources, NUMA nodes with CPUs,
    sharing storage by two aggregates."""
    b = Builder(base)
    a, bb, c = (str(uuid.uuid4()) for _ in range(3))
    env.update(AGGA_UUID=a, AGGB_UUID=bb, AGGC_UUID=c)
    cn1 = b.provider('cn1', a)
    cn2 = b.provider('cn2', a, bb)
    ss1 = b.provider('ss1', a)
    ss2 = b.provider('ss2', c)
    numas = [b.provider('numa1_1', c, parent=cn1), b.provider('numa1_2', parent=cn1),
             b.provider('numa2_1', parent=cn2), b.provider('numa2_2', parent=cn2)]
    env.update(CN1_UUID=cn1, CN2_UUID=cn2, SS1_UUID=ss1, SS2_UUID=ss2, NUMA1_1_UUID=numas[0],
               NUMA1_2_UUID=numas[1], NUMA2_1_UUID=numas[2], NUMA2_2_UUID=numas[3])
    for numa in numas:
        b.inventory(numa, 'VCPU', 24, allocation_ratio=16.0)
    for ss in (ss1, ss2):
        b.inventory(ss, 'DISK_GB', 2000, reserved=100, allocation_ratio=1.0)
        b.traits(ss, 'MISC_SHARES_VIA_AGGREGATE')


def numa_network_fixture(base, env, deep=False):
    """Placement's NUMANetworkFixture (deep: DeepNUMANetworkFixture, whose compute nodes have a
    parent and a grandparent without resources)."""
    b = Builder(base)
    cn1 = cn2 = None
    if deep:
        gp1 = b.provider('gp1')
        p1 = b.provider('p1', parent=gp1)
        p2 = b.provider('p2', parent=gp1)
        cn1 = b.provider('cn1', parent=p1)
        cn2 = b.provider('cn2', parent=p2)
    agg = env['AGGA_UUID'] = str(uuid.uuid4())
    ss1 = b.provider('ss1', agg)
    b.traits(ss1, 'MISC_SHARES_VIA_AGGREGATE')
    b.inventory(ss1, 'DISK_GB', 2000)
    env['SS1_UUID'] = ss1
    cn1 = cn1 or b.provider('cn1', agg)
    b.aggregates(cn1, [agg])
    b.traits(cn1, 'COMPUTE_VOLUME_MULTI_ATTACH')
    env['CN1_UUID'] = cn1
    numas = []
    for i in (0, 1):
        numa = b.provider(f'numa{i}', parent=cn1)
        b.traits(numa, *(['HW_NUMA_ROOT'] + (['CUSTOM_FOO'] if i == 1 else [])))
        b.inventory(numa, 'VCPU', 4)
        numas.append(numa)
        env[f'NUMA{i}_UUID'] = numa
    b.inventory(numas[0], 'MEMORY_MB', 2048, min_unit=512, step_size=256)
    b.inventory(numas[1], 'MEMORY_MB', 2048, min_unit=256, max_unit=1024)
    user, project = 'numafx-user', 'numafx-project'
    b.allocate(numas[0], str(uuid.uuid4()), user, project, {'VCPU': 2})
    fpga = env['FPGA0_UUID'] = b.provider('fpga0', parent=numas[0])
    b.inventory(fpga, 'FPGA', 1)
    pgpu = env['PGPU0_UUID'] = b.provider('pgpu0', parent=numas[0])
    b.inventory(pgpu, 'VGPU', 8)
    for i in (0, 1):
        fpga = env[f'FPGA1_{i}_UUID'] = b.provider(f'fpga1_{i}', parent=numas[1])
        b.inventory(fpga, 'FPGA', 1)
    agent = env['SRIOV_AGENT_UUID'] = b.provider('sriov_agent', parent=cn1)
    b.traits(agent, 'CUSTOM_VNIC_TYPE_DIRECT')
    for i in (1, 2):
        dev = env[f'ESN{i}_UUID'] = b.provider(f'esn{i}', parent=agent)
        b.traits(dev, f'CUSTOM_PHYSNET{i}')
        b.inventory(dev, 'NET_BW_EGR_KILOBIT_PER_SEC', 10000 * i)
    agent = env['OVS_AGENT_UUID'] = b.provider('ovs_agent', parent=cn1)
    b.traits(agent, 'CUSTOM_VNIC_TYPE_NORMAL')
    dev = env['BR_INT_UUID'] = b.provider('br_int', parent=agent)
    b.traits(dev, 'CUSTOM_PHYSNET0')
    b.inventory(dev, 'NET_BW_EGR_KILOBIT_PER_SEC', 1000)
    cn2 = cn2 or b.provider('cn2')
    b.aggregates(cn2, [agg])
    b.inventory(cn2, 'VCPU', 8)
    b.allocate(cn2, str(uuid.uuid4()), user, project, {'VCPU': 3})
    b.inventory(cn2, 'MEMORY_MB', 2048, min_unit=1024, step_size=128)
    b.inventory(cn2, 'DISK_GB', 1000)
    b.traits(cn2, 'CUSTOM_FOO')
    env['CN2_UUID'] = cn2
    nics = []
    for i in (1, 2, 3):
        nic = env[f'NIC{i}_UUID'] = b.provider(f'nic{i}', parent=cn2)
        b.traits(nic, 'CUSTOM_HW_NIC_ROOT')
        nics.append(nic)
    pfs = [('1_1', 0, 1, 4), ('1_2', 0, 2, 4)]
    pfs += [(f'2_{i + 1}', 1, (i % 2) + 1, 2) for i in range(4)]
    pfs += [('3_1', 2, 1, 8)]
    for suffix, nic, net, total in pfs:
        pf = env[f'PF{suffix}_UUID'] = b.provider(f'pf{suffix}', parent=nics[nic])
        b.traits(pf, f'CUSTOM_PHYSNET{net}')
        b.inventory(pf, 'CUSTOM_VF', total)


def non_shared_storage_fixture(base, env):
    """Placement's NonSharedStorageFixture: three compute nodes with local storage."""
    b = Builder(base)
    for key in ('AGGA_UUID', 'AGGB_UUID', 'AGGC_UUID'):
        env[key] = str(uuid.uuid4())
    cns = [b.provider(name) for name in ('cn1', 'cn2', 'cn3')]
    env.update(CN1_UUID=cns[0], CN2_UUID=cns[1], CN3_UUID=cns[2])
    for cn in cns:
        b.inventory(cn, 'VCPU', 24)
        b.inventory(cn, 'MEMORY_MB', 128 * 1024)
        b.inventory(cn, 'DISK_GB', 2000)


def granular_fixture(base, env):
    """Placement's GranularFixture: three compute nodes and three sharing providers in three
    aggregates, for granular requests."""
    b = Builder(base)
    b.resource_class('CUSTOM_NET_MBPS')
    a, bb, c = (str(uuid.uuid4()) for _ in range(3))
    env.update(AGGA=a, AGGB=bb, AGGC=c)
    left = env['CN_LEFT'] = b.provider('cn_left', a)
    for rc, total in [('VCPU', 8), ('MEMORY_MB', 4096), ('DISK_GB', 500), ('VGPU', 8),
                      ('SRIOV_NET_VF', 8), ('CUSTOM_NET_MBPS', 4000)]:
        b.inventory(left, rc, total)
    b.traits(left, 'HW_CPU_X86_AVX', 'HW_CPU_X86_AVX2', 'HW_GPU_API_DXVA', 'HW_NIC_DCB_PFC',
             'CUSTOM_FOO')
    middle = env['CN_MIDDLE'] = b.provider('cn_middle', a, bb)
    for rc, total in [('VCPU', 8), ('MEMORY_MB', 4096), ('SRIOV_NET_VF', 8),
                      ('CUSTOM_NET_MBPS', 4000)]:
        b.inventory(middle, rc, total)
    b.traits(middle, 'HW_CPU_X86_AVX', 'HW_CPU_X86_AVX2', 'HW_CPU_X86_SSE', 'HW_NIC_ACCEL_TLS')
    right = env['CN_RIGHT'] = b.provider('cn_right', bb, c)
    b.inventory(right, 'VCPU', 8)
    b.inventory(right, 'MEMORY_MB', 4096)
    b.inventory(right, 'DISK_GB', 500)
    b.inventory(right, 'VGPU', 8, max_unit=2)
    b.traits(right, 'HW_CPU_X86_MMX', 'HW_GPU_API_DXVA', 'CUSTOM_DISK_SSD')
    disk1 = env['SHR_DISK_1'] = b.provider('shr_disk_1', a)
    b.inventory(disk1, 'DISK_GB', 1000)
    b.traits(disk1, 'MISC_SHARES_VIA_AGGREGATE', 'CUSTOM_DISK_SSD')
    disk2 = env['SHR_DISK_2'] = b.provider('shr_disk_2', a, bb)
    b.inventory(disk2, 'DISK_GB', 1000)
    b.traits(disk2, 'MISC_SHARES_VIA_AGGREGATE')
    net = env['SHR_NET'] = b.provider('shr_net', c)
    b.inventory(net, 'SRIOV_NET_VF', 16)
    b.inventory(net, 'CUSTOM_NET_MBPS', 40000)
    b.traits(net, 'MISC_SHARES_VIA_AGGREGATE')


def neutron_qos_multi_segment_fixture(base, env):
    """Placement's NeutronQoSMultiSegmentFixture: four compute trees of an OVS agent (a bridge or
    two below it) and an SR-IOV agent (one PF or two below it), on network segments told by
    physnet traits. As the fixture does, compute3:sriov_agent names compute2's agent."""
    b = Builder(base)
    sriov_traits = ('CUSTOM_VNIC_TYPE_DIRECT', 'CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL',
                    'CUSTOM_VNIC_TYPE_MACVTAP')
    physnets = {0: ['OTHER'], 1: ['MSN_S1'], 2: ['MSN_S2'], 3: ['MSN_S1', 'MSN_S2']}
    for n in range(4):
        bw = 1000 if n == 3 else None
        compute = env[f'compute{n}'] = b.provider(f'compute{n}')
        b.inventory(compute, 'VCPU', 8)
        b.inventory(compute, 'MEMORY_MB', 4096)
        b.inventory(compute, 'DISK_GB', 500)
        ovs = env[f'compute{n}:ovs_agent'] = b.provider(
            f'compute{n}:Open vSwitch agent', parent=compute)
        b.inventory(ovs, 'NET_PACKET_RATE_KILOPACKET_PER_SEC', 1000)
        b.traits(ovs, 'CUSTOM_VNIC_TYPE_NORMAL')
        for i, net in enumerate(physnets[n]):
            suffix = '' if i == 0 else str(i + 1)
            br = env[f'compute{n}:br_ex{suffix}'] = b.provider(
                f'compute{n}:Open vSwitch agent:br-ex{suffix}', parent=ovs)
            b.inventory(br, 'NET_BW_EGR_KILOBIT_PER_SEC', bw or 5000)
            b.inventory(br, 'NET_BW_IGR_KILOBIT_PER_SEC', bw or 5000)
            b.traits(br, 'CUSTOM_VNIC_TYPE_NORMAL', f'CUSTOM_PHYSNET_{net}')
        sriov = b.provider(f'compute{n}:NIC Switch agent', parent=compute)
        env[f'compute{n}:sriov_agent'] = env['compute2:sriov_agent'] if n == 3 else sriov
        b.traits(sriov, *sriov_traits)
        for i, net in enumerate(physnets[n]):
            pf = env[f'compute{n}:pf{i}'] = b.provider(
                f'compute{n}:NIC Switch agent:enp129s0f{i}', parent=sriov)
            b.inventory(pf, 'NET_BW_EGR_KILOBIT_PER_SEC', bw or 10000)
            b.inventory(pf, 'NET_BW_IGR_KILOBIT_PER_SEC', bw or 10000)
            b.traits(pf, *sriov_traits, f'CUSTOM_PHYSNET_{net}')


FIXTURES = {
    'APIFixture': lambda base, env: None,
    'AllocationFixture': allocation_fixture,
    'SharedStorageFixture': shared_storage_fixture,
    'NUMAAggregateFixture': numa_aggregate_fixture,
    'NUMANetworkFixture': numa_network_fixture,
    'DeepNUMANetworkFixture': lambda base, env: numa_network_fixture(base, env, deep=True),
    'NonSharedStorageFixture': non_shared_storage_fixture,
    'GranularFixture': granular_fixture,
    'NeutronQoSMultiSegmentFixture': neutron_qos_multi_segment_fixture,
}


def write_standard_traits(tmp):
    """os-traits' names, one a line, for bench/serve.ts."""
    path = os.path.join(tmp, 'standard-traits.txt')
    with open(path, 'w') as f:
        f.write(''.join(f'{name}\n' for name in os_traits.get_traits()))
    return path


def start_server(traits_file):
    proc = subprocess.Popen(['npx', 'tsx', 'bench/serve.ts', 'memory', traits_file, '--noauth2'],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    port = int(line.split()[1])
    return proc, f'http://127.0.0.1:{port}'


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def start_placement(tmp, name):
    """Placement 8.0 on a fresh SQLite database (its standard traits and classes synced at start)."""
    port = free_port()
    proc = subprocess.Popen(['/usr/bin/python3', 'bench/placement_server.py',
                             os.path.join(tmp, f'placement-{name}'), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    for line in proc.stdout:  # its database migrations log first
        if line.startswith('listening'):
            break
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        sys.exit('Placement did not start (is python3-placement installed?)')
    # Keep reading its log, so that a full pipe never blocks it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, f'http://127.0.0.1:{port}'


def run_file(git_dir, name, tmp, traits_file, target):
    text = subprocess.run(
        ['git', '--git-dir', git_dir, 'show',
         f'HEAD:placement/tests/functional/gabbits/{name}.yaml'],
        check=True, capture_output=True, text=True).stdout
    path = os.path.join(tmp, f'{name}.yaml')
    with open(path, 'w') as f:
        f.write(text)
    proc, base = start_placement(tmp, name) if target == 'placement' else start_server(traits_file)
    try:
        env = api_fixture_environ()
        for fixture in (yaml.safe_load(text) or {}).get('fixtures') or []:
            FIXTURES[fixture](base, env)
        with open(path) as stdin:
            out = subprocess.run(['gabbi-run', base], stdin=stdin, capture_output=True,
                                 text=True, env={**os.environ, **env})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the server (and the tsx parent of ours)
        proc.wait()
    report = out.stdout + out.stderr
    ran = re.search(r'Ran (\d+) test', report)
    total = int(ran.group(1)) if ran else 0
    return total, verdicts(text, report), report


METHODS = ('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS')


def verdicts(text, report):
    """Each test of the file, in the file's order: a dict of its name, method, url (as written
    in the YAML), whether it passed and, if not, gabbi's first line of why (a status, a string
    not found, a JSON path value, a header) and the error code of our answer, when it has one."""
    # gabbi-run prints a mark a test, in order (✓ passed, ✗ failed, E error), then a block per
    # failure: "FAIL: <name>[: <desc>]" and gabbi's message, tab-indented.
    marks = re.findall(r'^\.\.\. (\S+) gabbi-runner\.input_', report, re.M)
    blocks = {}
    for m in re.finditer(r'^(?:FAIL|ERROR): gabbi-runner\.input_(.+)\n((?:\t.*\n?)*)', report,
                         re.M):
        body = m.group(2)
        code = re.search(r'"code": "([^"]+)"', body)
        blocks[m.group(1).split(': ')[0].strip()] = (
            body.split('\n')[0].strip(), code.group(1) if code else None)
    tests = (yaml.safe_load(text) or {}).get('tests') or []
    out = []
    for test, mark in zip(tests, marks):
        method = next((m for m in METHODS if m in test), None)
        url = test[method] if method else test.get('url', '')
        key = str(test.get('name', '')).lower().replace(' ', '_')
        why, code = blocks.get(key, (None, None))
        paths = test.get('response_json_paths') or {}
        out.append({'name': test.get('name', ''), 'method': method or test.get('method', 'GET'),
                    'url': str(url), 'passed': mark == '✓', 'why': why, 'code': code,
                    'expected_code': paths.get('$.errors[0].code')})
    return out


def main():
    args = sys.argv[1:]
    target = 'ours'
    if args[:1] == ['--target']:
        target, args = args[1], args[2:]
    if target not in ('ours', 'placement') or not args:
        sys.exit(__doc__)
    git_dir = args[0]
    files = args[1:] or FILES
    head = subprocess.run(['git', '--git-dir', git_dir, 'rev-parse', 'HEAD'], check=True,
                          capture_output=True, text=True).stdout.strip()
    print(f'target: {target}; placement commit: {head}', flush=True)
    all_total = all_failed = 0
    with tempfile.TemporaryDirectory(prefix='rigging-gabbi-') as tmp:
        traits_file = write_standard_traits(tmp)
        for name in files:
            total, tests, report = run_file(git_dir, name, tmp, traits_file, target)
            failed = [t for t in tests if not t['passed']]
            if len(tests) != total:
                sys.exit(f'{name}: gabbi ran {total} tests, the file has {len(tests)} read')
            all_total += total
            all_failed += len(failed)
            print(f'{name}: {total} tests, {total - len(failed)} passed, {len(failed)} failed',
                  flush=True)
            for t in tests:
                print(f"  {'pass' if t['passed'] else 'FAIL'}: {t['method']} {t['url']} :: {t['name']}")
                if not t['passed']:
                    print(f"    why: {t['why']}")
                    print(f"    code: {t['code']}; expected: {t['expected_code']}")
            if os.environ.get('GABBI_VERBOSE'):
                print(report)
    print(f'total: {all_total} tests, {all_total - all_failed} passed, {all_failed} failed')


if __name__ == '__main__':
    main()
