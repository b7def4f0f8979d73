#!/usr/bin/python3
"""Writes the seed corpus of fuzz_mgmt: management requests as clients send them, and
bare AMQP values. usage: gen_mgmt_corpus.py DIR"""
import sys

from proton import Data, Message, symbol, timestamp, ulong


def req(op, typ, name=None, body=None, **extra):
    props = {'operation': op, 'type': typ}
    if name is not None:
        props['name'] = name
    props.update(extra)
    return Message(id='req-1', reply_to='$me', properties=props, body=body).encode()


def value(v):
    d = Data()
    d.put_object(v)
    return d.encode()


SEEDS = [
    req('READ', 'com.mqd:broker'),
    req('READ', 'com.mqd:topic', 'orders'),
    req('CREATE', 'com.mqd:topic', 'orders', {'partitions': 3, 'flush': 'sync',
                                             'retention_ms': 86400000}),
    req('UPDATE', 'com.mqd:topic', 'orders', {'partitions': 6}),
    req('DELETE', 'com.mqd:topic', 'orders'),
    req('QUERY', 'com.mqd:consumergroup', None, {'attributeNames': ['name', 'lag']}),
    req('RESET', 'com.mqd:consumergroup', 'g1', {'topic': 'orders', 'offsets': {'0': 10}}),
    req('READ', 'com.microsoft:eventhub', 'hub', None, security_token='x'),
    req('READ', 'com.microsoft:partition', 'hub', None, partition='0'),
    req('CLOSE', 'com.mqd:connection', '7'),
    value({symbol('k'): [1, 2.5, True, None, timestamp(1700000000000), ulong(2 ** 64 - 1),
                         b'bin\xff', {'nested': {'deeper': [[[]]]}}]}),
    value([[[[[[[[[[['too deep']]]]]]]]]]]),
]

for n, s in enumerate(SEEDS, 1):
    with open('%s/seed-%d' % (sys.argv[1], n), 'wb') as f:
        f.write(s)
