import { existsSync, readFileSync } from 'node:fs';
import { type DefaultTheme, defineConfig } from 'vitepress';

// The API pages and their sidebar are written by TypeDoc (`pnpm --filter @dlock/docs api`) before VitePress runs; without them
// the guides still build, with the API section empty.
const apiSidebarFile = new URL('../api/typedoc-sidebar.json', import.meta.url);
const apiSidebar: DefaultTheme.SidebarItem[] = existsSync(apiSidebarFile)
  ? JSON.parse(readFileSync(apiSidebarFile, 'utf8'))
  : [];

const guides: DefaultTheme.SidebarItem[] = [
  {
    text: 'Start',
    items: [
      { text: 'What dlock is', link: '/' },
      { text: 'Choosing a backend', link: '/guide/choosing-a-backend' },
    ],
  },
  {
    text: 'Getting started',
    items: [
      { text: 'In memory', link: '/backends/memory' },
      { text: 'Redis (one server or a cluster)', link: '/backends/redis' },
      { text: 'Redlock (N independent Redis)', link: '/backends/redlock' },
      { text: 'etcd', link: '/backends/etcd' },
      { text: 'ZooKeeper', link: '/backends/zookeeper' },
      { text: 'PostgreSQL', link: '/backends/postgres' },
    ],
  },
  {
    text: 'Guides',
    items: [
      { text: 'Fencing cookbook', link: '/guide/fencing' },
      { text: 'Cron: at most once per period', link: '/guide/cron' },
      { text: 'Leader election', link: '/guide/leader-election' },
      { text: 'Semaphores', link: '/guide/semaphores' },
      { text: 'Graceful shutdown', link: '/guide/graceful-shutdown' },
      { text: 'Testing your code', link: '/guide/testing' },
    ],
  },
  {
    text: 'Migrating',
    items: [
      { text: 'From redlock', link: '/guide/from-redlock' },
      { text: 'From redis-semaphore', link: '/guide/from-redis-semaphore' },
    ],
  },
  { text: 'Benchmarks', items: [{ text: 'Results and charts', link: '/benchmarks' }] },
];

export default defineConfig({
  title: 'dlock',
  description: 'Distributed locks for Node.js that detect loss and fence the resource.',
  cleanUrls: true,
  lastUpdated: false,
  // demo-dashboard.png lives here for the root README; node_modules is VitePress's own.
  srcExclude: ['**/node_modules/**', 'README.md', '.generated/**', '.blocks/**', 'test/**', 'scripts/**'],
  themeConfig: {
    nav: [
      { text: 'Guide', link: '/backends/memory' },
      { text: 'Choosing a backend', link: '/guide/choosing-a-backend' },
      { text: 'API', link: '/api/' },
      { text: 'Benchmarks', link: '/benchmarks' },
    ],
    sidebar: {
      '/api/': [{ text: 'API reference', link: '/api/', items: apiSidebar }],
      '/': guides,
    },
    search: { provider: 'local' },
    outline: { level: [2, 3] },
  },
});
